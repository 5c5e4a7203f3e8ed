"""``reference=file|hf|gguf``: another model's outputs on the run's data, for the analyzers that
compare. The reference loads, answers and leaves before the model under analysis loads, so the run
holds one model at a time; its outputs are kept on disk under a key of everything they depend on
(the reference's files, the data, the scoring settings), so a sweep over quantized variants scores
its reference once."""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import io
import json
import logging
from pathlib import Path
from typing import Any

import torch

from modelxray.core.errors import ConfigError
from modelxray.core.files import write_file
from modelxray.core.provenance import versions
from modelxray.kinds.base import choose
from modelxray.kinds.causal_lm import CausalLM
from modelxray.kinds.classifier import Classifier
from modelxray.kinds.labelled_images import LabelledImagesKind
from modelxray.kinds.table import kind_of, named
from modelxray.kinds.windows import WindowsKind

log = logging.getLogger("modelxray.app")

STATE_FORMAT = 2  # of the cached outputs: another format is computed again


@dataclasses.dataclass
class ReferenceOutputs:
    """The reference's outputs (``Subject.reference`` for its task) and what the report says of it."""

    task: str
    outputs: Any  # measure.reference.Reference (a language model) or {"logits": ...} (a classifier); None without performance
    name: str
    cached: str | None  # the cache file it was read from, else None
    # a language model's outputs on other analyzers' windows: their baseline (name -> Reference)
    baselines: dict[str, Any] = dataclasses.field(default_factory=dict)


def baseline_specs(components) -> dict[str, tuple[int | None, int, int]]:
    """The analyzers of the run that take the reference as their baseline, with their windows,
    batch size and KL windows (``Analyzer.reference_windows``)."""
    specs = {}
    for name, analyzer in components.analyzers.items():
        spec = analyzer.reference_windows()
        if spec is not None:
            specs[name] = tuple(spec)
    return specs


def paired_specs(components) -> dict[str, dict]:
    """The analyzers of the run that pair their own figures with the reference's (lm_eval: every
    document's scores), with their settings (part of the cache key)."""
    from importlib import metadata

    from modelxray.analyzers.base import Analyzer

    def version(package: str) -> str | None:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return None

    return {
        name: {**dataclasses.asdict(analyzer), "seed": components.settings.seed, "lm-eval": version("lm-eval")}
        for name, analyzer in components.analyzers.items()
        if type(analyzer).unquantized_baseline is not Analyzer.unquantized_baseline
    }


def check_reference_use(components) -> None:
    """Before any work: a reference needs an analyzer that compares with it (performance its
    outputs, inspect its weights, quant_impact and bitwidth as their baseline)."""
    if components.reference is not None and not (
        {"performance", "inspect"} & set(components.analyzers) or baseline_specs(components) or paired_specs(components)
    ):
        raise ConfigError(
            "reference",
            "is compared with by analyzer=performance (outputs), inspect (weights), quant_impact and bitwidth "
            "(their baseline), none of which this run runs: add one ('analyzer=[performance,...]') or drop reference=",
        )


def reference_outputs(cfg, components, given, progress: bool) -> ReferenceOutputs:
    """The reference's outputs on the run's data: read from the cache, else computed (the reference
    loaded without the process cache, then released) and cached."""
    from modelxray.app.loading import load_subject

    source, performance = components.reference, components.analyzers.get("performance")
    specs = baseline_specs(components)

    def compute() -> dict:
        ref_components = dataclasses.replace(components, model=source)
        subject, _ = load_subject(cfg, ref_components, batches=given.batches, cache_size=0)
        kind = kind_of(subject)
        if not kind.compared_by_reference:
            raise ConfigError(
                "reference",
                f"{subject.info.name} is a {kind} model; reference= compares language "
                "models, classifiers, text, speech and vision models (for any other module, the model before "
                "quant= is the reference: reference=none)",
            )
        if specs and not isinstance(kind, CausalLM):
            one = len(specs) == 1
            raise ConfigError(
                "reference",
                f"{' and '.join(sorted(specs))} {'takes' if one else 'take'} reference= as {'its' if one else 'their'} "
                f"baseline for language models; for a {kind} model "
                f"{'its' if one else 'their'} baseline is the model as loaded: drop reference= or compare with "
                "analyzer=performance",
            )
        name = f"reference {subject.info.name}"
        state = _capture(subject, performance, name, progress) if performance is not None else _empty(subject, name)
        state["baselines"] = _baselines(subject, specs, name, progress) if isinstance(kind, CausalLM) else {}
        state["documents"] = {  # what the analyzers that pair by document keep of the reference (lm_eval)
            analyzer: components.analyzers[analyzer].unquantized_baseline(subject, components.settings.seed)[
                "documents"
            ]
            for analyzer in paired_specs(components)
        }
        del subject
        gc.collect()
        return state

    return cached_outputs(components, source, given.batches is None, compute, specs=specs)


def _empty(subject, name: str) -> dict:
    return {
        "format": STATE_FORMAT,
        "task": subject.task,
        "kind": kind_of(subject).name,
        "name": name,
        "reference": None,
    }


def _baselines(subject, specs: dict, name: str, progress: bool) -> dict:
    """The reference's outputs on each analyzer's windows, as ``Reference`` states."""
    from modelxray.measure.reference import Reference
    from modelxray.metrics.windows import lm_eval_windows

    out = {}
    for analyzer, (limit, batch_size, kl_windows) in specs.items():
        windows = lm_eval_windows(subject.data, subject.batches, limit)
        ref = Reference(subject.model, windows, batch_size, kl_windows, progress, f"{analyzer}: {name}")
        ref.label = f"the {name}"
        out[analyzer] = ref.state()
    return out


def unquantized_outputs(subject, components, cacheable: bool, progress: bool) -> ReferenceOutputs:
    """The model's own outputs before ``quant=`` (a language model's or a classifier's), read from
    the reference cache when the same model was scored on the same data before (the other jobs of a
    quantization sweep), else computed on ``subject`` and cached."""
    performance = components.analyzers["performance"]
    compute = lambda: _capture(subject, performance, "unquantized model", progress)  # noqa: E731
    weights = weights_fingerprint(subject.model) if cacheable else None  # a model trained again is another model
    return cached_outputs(components, components.model, cacheable, compute, weights)


def cached_outputs(
    components, source, cacheable: bool, compute, weights: str | None = None, specs: dict | None = None
) -> ReferenceOutputs:
    """``compute()``'s state, or the one kept under the same content key (``runtime.reference_cache_dir``)."""
    cache_dir = components.settings.runtime.reference_cache_dir
    performance = components.analyzers.get("performance")
    paired = paired_specs(components)
    key = content_key(source, components.dataset, performance, weights, specs, paired) if cacheable else None
    path = Path(cache_dir).expanduser() / f"{key}.pt" if cache_dir and key else None
    if path is not None and path.exists():
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            if state.get("format") == STATE_FORMAT:
                log.info("Outputs of the %s read from %s", state["name"], path)
                return _from_state(state, str(path))
        except Exception as exc:  # noqa: BLE001 - a cache file that cannot be read is computed again
            log.warning("Reference outputs in %s cannot be read (%s): computing them again", path, exc)
    state = compute()
    if path is not None:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_file(path, buffer.getvalue())
            log.info("Outputs of the %s computed and kept in %s", state["name"], path)
        except OSError as exc:  # a full disk costs the next run this computation, never this run
            log.warning("Outputs of the %s not kept in %s: %s", state["name"], path, exc)
    return _from_state(state, None)


def reference_weights(source) -> Any:
    """The reference's weights as files read one tensor at a time, where its tensors carry the names a
    loaded model's parameters do: a safetensors file, a state dict, or a directory of safetensors
    shards; None otherwise (a GGUF names its tensors its own way; a hub id is not opened here)."""
    from modelxray.models.weights_file import WeightsFile, WeightsFiles

    value = getattr(source, "path", None) or getattr(source, "name_or_path", None)
    path = Path(str(value)).expanduser() if value else None
    if path is None or not path.exists():
        return None
    if path.is_dir():
        shards = sorted(path.glob("*.safetensors"))
        return WeightsFiles([WeightsFile(f, "safetensors") for f in shards]) if shards else None
    if path.suffix == ".safetensors":
        return WeightsFile(path, "safetensors")
    if path.suffix in (".pt", ".pth", ".bin"):
        return WeightsFile(path, "state_dict")
    return None


def check_against(ref: ReferenceOutputs, subject, performance, specs: dict | None = None) -> None:
    """After the model under analysis loads, before any work: the reference answered the same
    task on the same data (token ids, test examples), else one line saying what differs."""
    if subject.task != ref.task:
        raise ConfigError(
            "reference",
            f"the {ref.name} is a {ref.task} model and {subject.info.name} a {subject.task} model: compare models of one kind",
        )
    _check_baselines(ref, subject, specs or {})
    if ref.outputs is None:
        return  # no performance analyzer: only the baselines compare
    _outputs(kind_of(subject)).check(ref, subject, performance)


def _check_baselines(ref: ReferenceOutputs, subject, specs: dict) -> None:
    """quant_impact and bitwidth take a language model's reference as their baseline, on the same tokens."""
    from modelxray.metrics.windows import lm_eval_windows

    for name, baseline in ref.baselines.items():
        if name not in specs:  # paired by document (lm_eval), not by token windows
            continue
        differs = baseline.same_tokens(lm_eval_windows(subject.data, subject.batches, specs[name][0]))
        if differs:
            raise ConfigError(
                "reference",
                f"the {ref.name} was scored on other tokens than {subject.info.name} ({differs}): the two tokenize "
                "the data differently; compare models that share a tokenizer",
            )


def _check_same_images(ref: ReferenceOutputs, subject) -> None:
    """A vision reference saw the same number of images (and, for segmentation maps, at the same size)."""
    out, n = ref.outputs, int(subject.data.n_examples)
    got = (
        len(out["detections"])
        if "detections" in out
        else int(next(v for v in out.values() if isinstance(v, torch.Tensor)).shape[0])
    )
    maps = out.get("class_maps")
    masks = getattr(subject.data, "masks", None)
    if got != n or (maps is not None and masks is not None and tuple(maps.shape) != tuple(masks.shape)):
        shape = f"{tuple(maps.shape)} maps" if maps is not None else f"{got} images"
        raise ConfigError(
            "reference",
            f"the {ref.name} gave {shape}; {subject.info.name} is scored on {n} images"
            + (f" of {tuple(masks.shape[1:])} pixels" if masks is not None else "")
            + ": compare models that take the same image size on the same data",
        )


def weights_fingerprint(model: torch.nn.Module) -> str:
    """The model's weights in a few numbers per tensor (its sum, its norm and every 997th value,
    hashed): cheap next to scoring, and another training of the same config differs in them."""
    digest = hashlib.sha256()
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
                continue
            flat = tensor.detach().reshape(-1)
            digest.update(f"{name}{tuple(tensor.shape)}{float(flat.sum())!r}{float(flat.norm())!r}".encode())
            digest.update(flat[::997].float().cpu().numpy().tobytes())
    return digest.hexdigest()[:24]


def content_key(
    source, dataset, performance, weights: str | None = None, specs: dict | None = None, paired: dict | None = None
) -> str:
    """What the reference's outputs depend on, hashed: its config and files (size and time of each),
    the dataset's config, the scoring settings (the performance analyzer's, and the windows of each
    analyzer taking it as baseline) and the library versions."""
    described = {
        "format": STATE_FORMAT,
        "source": [type(source).__qualname__, dataclasses.asdict(source)],
        "files": _fingerprints(source),
        "dataset": [type(dataset).__qualname__, dataclasses.asdict(dataset)] if dataset is not None else None,
        "scoring": dataclasses.asdict(performance) if performance is not None else None,
        "baselines": specs or {},
        "paired": paired or {},
        "versions": versions(),  # a model built from a config (random weights) depends on torch's and transformers'
        "weights": weights,
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _fingerprints(source) -> list:
    """Size and modification time of every file the source names (a directory: of each file in it)."""
    out = []
    for attr in ("path", "name_or_path", "config"):
        value = getattr(source, attr, None)
        if not isinstance(value, str) or not Path(value).expanduser().exists():
            continue
        root = Path(value).expanduser().resolve()
        files = sorted(f for f in root.rglob("*") if f.is_file()) if root.is_dir() else [root]
        out += [[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files]
    return out


def _capture(subject, performance, name: str, progress: bool) -> dict:
    kind = kind_of(subject)
    state = {"format": STATE_FORMAT, "task": subject.task, "kind": kind.name, "name": name}
    state["reference"] = _outputs(kind).capture(subject, performance, name, progress)
    return state


def _from_state(state: dict, cached: str | None) -> ReferenceOutputs:
    from modelxray.measure.reference import Reference

    baselines: dict = {name: Reference.from_state(s) for name, s in state.get("baselines", {}).items()}
    for name, documents in state.get("documents", {}).items():
        baselines[name] = {"label": f"the {state['name']}", "documents": documents}
    if state["reference"] is None:
        return ReferenceOutputs(state["task"], None, state["name"], cached, baselines)
    outputs = _outputs(named(state["kind"])).load(state["reference"], state["name"])
    return ReferenceOutputs(state["task"], outputs, state["name"], cached, baselines)


def _outputs(kind) -> Any:
    """How a kind's reference outputs are kept, read back and checked against the model under analysis."""
    table = {
        CausalLM: _TokenOutputs(),
        WindowsKind: _WindowOutputs(),
        LabelledImagesKind: _ImageOutputs(),
        Classifier: _ClassifierOutputs(),
    }
    return choose(
        kind, table, "reference", "reference= compares language models, classifiers, text, speech and vision models"
    )


class _TokenOutputs:
    """A language model's outputs on the performance analyzer's token windows (``measure.reference``)."""

    def capture(self, subject, performance, name: str, progress: bool) -> Any:
        from modelxray.analyzers.performance.windows import lm_windows
        from modelxray.measure.reference_outputs import capture

        ref = capture(
            subject, performance, lm_windows(performance, subject)[0], progress, work=kind_of(subject).reference_work()
        )
        ref.label = f"the {name}"
        return ref.state()

    def load(self, saved: Any, name: str) -> Any:
        from modelxray.measure.reference import Reference

        return Reference.from_state(saved)

    def check(self, ref: ReferenceOutputs, subject, performance) -> None:
        from modelxray.analyzers.performance.windows import lm_windows

        differs = ref.outputs.same_tokens(lm_windows(performance, subject)[0])
        if differs:
            raise ConfigError(
                "reference",
                f"the {ref.name} was scored on other tokens than {subject.info.name} ({differs}): the two tokenize "
                "the data differently; compare models that share a tokenizer",
            )


class _WindowOutputs:
    """A text, speech or vision-language model's outputs on its windows, its greedy texts and (CTC) frames."""

    def capture(self, subject, performance, name: str, progress: bool) -> Any:
        from modelxray.measure.reference_outputs import capture

        ref = capture(
            subject, performance, work=kind_of(subject).reference_work()
        )  # measure.task_outputs.TaskReference
        windows = ref.windows.state() if ref.windows is not None else None
        if windows is not None:
            windows["label"] = f"the {name}"
        return {"windows": windows, "texts": ref.texts, "frame_logprobs": ref.frame_logprobs}

    def load(self, saved: Any, name: str) -> Any:
        from modelxray.measure.reference import Reference
        from modelxray.measure.task_outputs import TaskReference

        windows = Reference.from_state(saved["windows"]) if saved["windows"] is not None else None
        return TaskReference(windows, saved["texts"], saved["frame_logprobs"])

    def check(self, ref: ReferenceOutputs, subject, performance) -> None:
        windows = getattr(ref.outputs, "windows", None)
        differs = windows.same_tokens(subject.data.windows) if windows is not None and subject.data.windows else None
        if differs:
            raise ConfigError(
                "reference",
                f"the {ref.name} was scored on other examples than {subject.info.name} ({differs}): the two "
                "tokenize the data differently; compare models that share a tokenizer",
            )


class _TensorOutputs:
    """Outputs as tensors (logits, embeddings, maps) and a detector's list of per-image detections."""

    def capture(self, subject, performance, name: str, progress: bool) -> Any:
        from modelxray.measure.reference_outputs import capture

        outputs = capture(subject, performance, work=kind_of(subject).reference_work()).items()
        return {k: v for k, v in outputs if isinstance(v, torch.Tensor) or k == "detections"}

    def load(self, saved: Any, name: str) -> Any:
        return {**saved, "label": f"the {name}"}


class _ImageOutputs(_TensorOutputs):
    def check(self, ref: ReferenceOutputs, subject, performance) -> None:
        _check_same_images(ref, subject)


class _ClassifierOutputs(_TensorOutputs):
    def check(self, ref: ReferenceOutputs, subject, performance) -> None:
        logits, data = ref.outputs["logits"], subject.data
        n = int(getattr(data, "x_test", torch.zeros(0)).shape[0])
        if int(logits.shape[0]) != n or int(logits.shape[1]) != int(getattr(data, "n_classes", logits.shape[1])):
            raise ConfigError(
                "reference",
                f"the {ref.name} gave {tuple(logits.shape)} logits; {subject.info.name} is scored on {n} test examples "
                f"of {getattr(data, 'n_classes', '?')} classes: compare classifiers of the same classes on the same data",
            )
