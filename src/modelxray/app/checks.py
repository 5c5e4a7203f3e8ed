"""The loaded subject against the dataset, the quantizer and every analyzer, before any analyzer
works: a mismatch or a bad value is one ConfigError line, not a failure half-way through a run."""

from __future__ import annotations

from modelxray.core.errors import ConfigError
from modelxray.core.formatting import listed
from modelxray.core.subject import Subject
from modelxray.kinds.base import plurals
from modelxray.kinds.table import kind_of

ENGINE_ANALYZERS = ("performance",)  # what a model evaluated by another engine (llama.cpp) can run


def _check_engine(subject: Subject, analyzers: dict, quant) -> None:
    """A model evaluated by llama.cpp holds no PyTorch weights: only scoring and timing apply."""
    engine = getattr(subject.model, "engine", None)
    if engine is None:
        return
    for name in analyzers:
        if name not in ENGINE_ANALYZERS:
            raise ConfigError(
                "model.engine",
                f"{engine} evaluates {subject.info.name} with its own kernels; analyzer={name} reads or changes "
                "weights and needs the PyTorch engine (model.engine=pytorch)",
            )
    if quant is not None and getattr(quant, "name", "none") != "none":
        raise ConfigError(
            "model.engine",
            f"{engine} runs the file as it is quantized; quant= needs the PyTorch engine (model.engine=pytorch)",
        )


DISK_ANALYZERS = ("performance",)  # what a model whose weights accelerate left on disk can run


def check_disk_placement(disk: list[str], analyzers: dict, quant) -> None:
    """A device map that offloads modules (to disk, or to the CPU beside a GPU: meta tensors between
    forwards, read in at each one) runs scoring and timing; what reads or changes weights needs them
    in memory, or streamed block by block."""
    if not disk:
        return
    where = f"offloads {listed(disk)}, whose weights are read in at each forward"
    instead = "map them to cpu or a GPU, or stream the model with runtime.offload=blocks"
    for name in analyzers:
        if name not in DISK_ANALYZERS:
            raise ConfigError("model.device_map", f"{where}; analyzer={name} reads or changes the weights: {instead}")
    if quant is not None and getattr(quant, "name", "none") != "none":
        raise ConfigError("model.device_map", f"{where}; quant= changes the weights: {instead}")


def check_task(subject: Subject, analyzers: dict, quant=None) -> None:
    """The dataset, the quantizer and every analyzer must fit the kind of model: a language model,
    a classifier, or weights alone (a weights-only file, which cannot run)."""
    kind = kind_of(subject)
    wanted = kind.data_type()
    if subject.data is not None and wanted is not None and not isinstance(subject.data, wanted):
        raise ConfigError(
            "dataset",
            f"{type(subject.data).__name__} does not fit a {subject.task} model ({subject.info.name}); use {kind.fitting}",
        )
    _check_engine(subject, analyzers, quant)
    for name, analyzer in analyzers.items():
        if name in kind.cannot:  # the kind says why, in its own words
            raise ConfigError(
                f"analyzer.{name}", f"{subject.info.name} is {kind.a_noun()} ({kind.name}); {kind.cannot[name]}"
            )
        if not isinstance(kind, analyzer.model_kinds):
            fits = analyzers_for(kind)
            hint = f"analyzer={_one_of(fits)}" if fits else "another analyzer"
            raise ConfigError(
                f"analyzer.{name}",
                f"analyzes {plurals(analyzer.model_kinds)}, and {subject.info.name} is a {kind.noun} "
                f"({kind.name}); use {hint}{kind.analyzer_hint}",
            )
    if not kind.runs and quant is not None and getattr(quant, "name", "none") != "none":
        raise ConfigError(
            "quant",
            f"{subject.info.name} holds weights only (no model.architecture), so it "
            "cannot be quantized and run; use quant=none or set model.architecture",
        )


def preflight(subject: Subject, analyzers: dict) -> None:
    """Every analyzer's checks against the loaded subject, before any analyzer works: a bad value
    is one ConfigError line naming ``analyzer.<name>.<key>`` (exit 2), not a failure half-way."""
    for name, analyzer in analyzers.items():
        try:
            analyzer.preflight(subject)
        except ConfigError as exc:
            raise exc.under(f"analyzer.{name}") from None


def check_finite_weights(model, analyzers: dict) -> None:
    """Weights that hold NaN or Inf make every quality figure ``nan``: one line naming the tensors,
    before any analyzer works, unless every analyzer asked for reports broken weights (inspect)."""
    import torch

    if model is None or all(getattr(a, "studies_broken_weights", False) for a in analyzers.values()):
        return
    broken, total = [], 0
    with torch.no_grad():
        for name, tensor in (*model.named_parameters(), *model.named_buffers()):
            if not tensor.is_floating_point() or tensor.is_meta:
                continue
            total += 1
            bad = int((~torch.isfinite(tensor)).sum())
            if bad:
                broken.append(f"{name} ({bad:,} of {tensor.numel():,} values)")
    if broken:
        shown = listed(broken)
        raise ConfigError(
            "model",
            f"{len(broken)} of {total} weight tensors hold NaN or Inf values: {shown}; every quality figure would "
            "be nan. Check the checkpoint, or run analyzer=inspect alone to see where they are",
        )


def check_before_load(source, dataset, dataset_chosen: bool = True) -> None:
    """The model's kind and positions as its own config says (``source.declared()``: config.json or
    the option's keys) against the dataset, before any weight is read: a mismatch that would show only
    after the model loaded (minutes, for a large one) is one line now. The default dataset, when no
    ``dataset=`` was chosen, stands for each kind's own offline data (digit canvases for a detector)."""
    if source is None or dataset is None:
        return
    declared = source.declared()
    fits = declared.kind.modalities if declared.kind is not None else ()
    modality = getattr(dataset, "modality", None)
    name = getattr(dataset, "name", type(dataset).__name__)
    if modality and fits and modality not in fits and dataset_chosen:
        raise ConfigError(
            "dataset",
            f"{name} holds {modality}, and the model is of kind {declared.kind}{_said_by(declared)}, which needs "
            f"{' or '.join(fits)}; use {_a(fits[0].removesuffix('s'))} dataset ({', '.join(datasets_of(fits[0]))})",
        )
    seq_len = getattr(dataset, "seq_len", None)  # windows of exactly seq_len tokens: causal and masked LMs
    full_windows = declared.kind is not None and declared.kind.seq_len_within_positions
    if full_windows and declared.max_positions and isinstance(seq_len, int) and seq_len > declared.max_positions:
        raise ConfigError(
            "dataset.seq_len",
            f"{seq_len} tokens do not fit the model's {declared.max_positions} learned positions"
            f"{_said_by(declared)}; use dataset.seq_len={declared.max_positions} or less",
        )
    check_kind = getattr(dataset, "check_kind", None)  # a dataset one kind of model reads: said from its config
    if check_kind is not None and declared.kind is not None and dataset_chosen:
        check_kind(declared.kind)
    check_source = getattr(dataset, "check_source", None)  # data read now, so a bad file is found before the weights
    if check_source is not None:
        check_source()
    check_tokens = getattr(dataset, "check_tokens", None)  # a language model's text through its tokenizer alone
    if check_tokens is not None and declared.kind is not None and declared.kind.reads_token_batches:
        tokenizer = source.tokenizer_alone()
        if tokenizer is not None:
            check_tokens(tokenizer, declared.vocab_size)


def _said_by(declared) -> str:
    return f" ({declared.where})" if declared.where else ""


def analyzers_for(kind) -> list[str]:
    """The analyzer options that analyze a model of ``kind``, from each analyzer's own ``model_kinds``:
    the one place that says it, so no list of analyzers is kept by hand."""
    from modelxray.core.schema import SCHEMA, load_class

    return [
        name
        for name, path in SCHEMA["analyzer"].items()
        if isinstance(kind, load_class(path).model_kinds) and name not in kind.cannot
    ]


def datasets_of(modality: str) -> list[str]:
    """The dataset options whose examples are of ``modality`` (text, images, audio), from each
    dataset's own ``modality``."""
    from modelxray.core.schema import SCHEMA, load_class

    return [name for name, path in SCHEMA["dataset"].items() if getattr(load_class(path), "modality", None) == modality]


def _a(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def _one_of(names: list[str]) -> str:
    """``a, b or c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def check_trial_forward(subject: Subject) -> None:
    """One example of the model's own inputs through its forward, before any analyzer: a model that
    cannot run them (a processor that inserts more image tokens than the model makes, a width that
    differs from its inputs') is one line naming the model's own error, not a traceback inside the
    first analyzer after the model was quantized. A streamed or disk-offloaded model is not run here
    (one forward reads every weight from disk), nor one another engine runs."""
    from modelxray.models.device_map import offloaded

    model = subject.model
    if model is None or subject.stream is not None or getattr(model, "engine", None) or offloaded(model):
        return
    kind = kind_of(subject)
    inputs = kind.trial_inputs(subject)
    if inputs is None or _forward_error(model, inputs) is None:
        return
    inputs = kind.trial_inputs(subject, full=True)  # a short example first: a model fixed to one length
    exc = _forward_error(model, inputs)
    if exc is not None:
        said = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        raise ConfigError(
            "model",
            f"{subject.info.name} cannot run one example of its own inputs ({_shapes(inputs)}): "
            f"{type(exc).__name__}: {said[:300]}; check the model's config against its processor and inputs",
        ) from exc


def _forward_error(model, inputs) -> Exception | None:
    """What one forward of ``inputs`` raises (None: it ran)."""
    import torch

    from modelxray.measure.scoring import forward_logits

    try:
        with torch.inference_mode():
            forward_logits(model, inputs)
    except Exception as exc:  # noqa: BLE001 - whatever the model raises is reported as its own error
        return exc
    return None


def _shapes(inputs) -> str:
    """``input_ids [1, 16]`` or ``pixel_values [1, 3, 32, 32], input_ids [1, 20]``."""
    if isinstance(inputs, dict):
        return ", ".join(f"{n} {list(t.shape)}" if hasattr(t, "shape") else n for n, t in inputs.items())
    return f"inputs {list(inputs.shape)}"
