"""One run: validate, build the subject, quantize, analyze, report, track. Nothing else.

``run(cfg)`` is a plain function of the composed config (the CLI, the Python API and the tests
all call it), following lightning-hydra-template's ``train(cfg)``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from modelxray.config.components import build_components
from modelxray.core.errors import ConfigError
from modelxray.core.provenance import host, versions
from modelxray.core.result import Result, RunContext
from modelxray.core.subject import LoadedModel, ModelInfo, Subject
from modelxray.data.identity import identify
from modelxray.models import process_cache
from modelxray.report.writer import Written, write_reports, write_result
from modelxray.tracking.mlflow_tracker import DONE_TAG, PID_TAG, store_key
from modelxray.tracking.run_names import run_name as readable_run_name
from modelxray.tracking.run_tags import SWEPT_KEYS_ENV, run_tags

log = logging.getLogger(__name__)


@dataclass
class JobInfo:
    """What Hydra knows about this job (or what the Python API makes up in its place)."""

    output_dir: Path
    choices: dict[str, str] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    sweep_dir: str | None = None
    job_num: int | None = None


def choices_of(hydra_cfg) -> dict[str, str]:
    """Config group choices of the run (``quant=int4``...), without Hydra's own groups (``hydra/...``,
    and groups packaged under ``hydra``, e.g. ``local@hydra.launcher``)."""
    return {
        k: str(v)
        for k, v in hydra_cfg.runtime.choices.items()
        if not k.startswith("hydra") and "@hydra" not in k and v is not None
    }


class JobKilled(BaseException):
    """SIGTERM arrived (SLURM's scancel, a timeout, a shutdown): the run ends KILLED, not FAILED."""


@dataclass
class RunOutcome:
    metrics: dict[str, float]
    results: dict[str, Result]
    output_dir: Path
    run_id: str | None
    tracking: str
    skipped: bool = False  # runtime.skip_finished found this config FINISHED already
    view: str = ""  # how to open the runs in MLflow's UI

    @property
    def failed(self) -> list[str]:
        return [n for n, r in self.results.items() if not r.ok]


def flatten(node: Any, prefix: str = "") -> dict[str, str]:
    """Config as dotted keys -> strings (lists kept as one value), for MLflow params."""
    out: dict[str, str] = {}
    if isinstance(node, dict):
        for k, v in node.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict) and v:
                out.update(flatten(v, key))
            else:
                out[key] = "null" if v is None else str(v)
    return out


_NOT_IN_FINGERPRINT = ("tracker", "runtime", "progress", "model_cache_size")


def config_fingerprint(config: dict) -> str:
    """Identity of what a run computes: the resolved config without where it is logged or how it
    is shown. Two runs with the same fingerprint compute the same thing (``runtime.skip_finished``)."""
    import hashlib
    import json

    kept = {k: v for k, v in config.items() if k not in _NOT_IN_FINGERPRINT}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _view_hint(tracker_run) -> str:
    try:
        return tracker_run.view_hint()
    except Exception:  # noqa: BLE001 - a link is a convenience; the run is logged
        return ""


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _in_memory(
    model: torch.nn.Module, tokenizer: Any, image_shape: tuple | None = None, example_inputs: Any = None
) -> LoadedModel:
    """A user's module: a language model (with a tokenizer or token batches), an image classifier
    (``image_shape``) or a generic module (``example_inputs``: name -> tensor or shape)."""
    dtypes = {str(p.dtype).replace("torch.", "") for p in model.parameters()}
    info = ModelInfo(name=type(model).__name__, source_format="in-memory", source_dtype=",".join(sorted(dtypes)))
    if image_shape is not None:
        return LoadedModel(model.eval(), None, info, task="classification", image_shape=tuple(image_shape))
    if example_inputs is not None:
        from modelxray.models.generic import example_inputs_for

        given = example_inputs_for(model, example_inputs, key="example_inputs")
        return LoadedModel(model.eval(), None, info, task="generic", example_inputs=given)
    return LoadedModel(model.eval(), tokenizer, info)


def run(
    cfg: DictConfig,
    job: JobInfo,
    *,
    model: torch.nn.Module | None = None,
    tokenizer: Any = None,
    batches: Any = None,
    image_shape: tuple[int, int, int] | None = None,
    example_inputs: Any = None,
) -> RunOutcome:
    """Run the configured analyzers on the configured (or given) model and record everything."""
    if model is not None and tokenizer is None and batches is None and image_shape is None and example_inputs is None:
        raise ConfigError(
            "tokenizer",
            "an in-memory model needs a tokenizer or a dataloader of token batches (a language model), "
            "image_shape (an image classifier) or example_inputs (any other module)",
        )
    components = build_components(cfg, skip_model=model is not None, skip_dataset=batches is not None)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    _seed_everything(cfg.seed)
    logging.getLogger("torchao").setLevel(logging.ERROR)  # warns about its CUDA-only extensions on CPU
    # torchao (imported by transformers when installed) registers enums torch now warns about
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)
    out_dir = Path(job.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    config = OmegaConf.to_container(cfg, resolve=True)
    config.pop("hydra", None)
    swept = tuple(os.environ.get(SWEPT_KEYS_ENV, "").split(",")) if job.sweep_dir is not None else ()
    run_name = readable_run_name(job.choices, job.overrides, config, swept)
    tags = run_tags(job.overrides, job.sweep_dir, job.job_num, store_key(components.tracker))
    config_hash = config_fingerprint(config)
    tags["modelxray.config_hash"] = config_hash
    tags[PID_TAG] = str(os.getpid())
    resume_id, done = _resume_point(cfg, components.tracker, config_hash)
    if resume_id == "finished":
        run_id, metrics = done
        return RunOutcome(metrics, {}, out_dir, run_id, f"skipped: FINISHED before as run {run_id}", skipped=True)
    if resume_id is not None:
        tracker_run = components.tracker.resume(resume_id, {**tags, "modelxray.resumed_analyzers": ",".join(done)})
        log.info("Resuming run %s: %s finished there and are not run again", resume_id, ", ".join(done))
    else:
        tracker_run = components.tracker.start(run_name, tags)
    tracker_run.record(out_dir)
    results: dict[str, Result] = {}
    written: dict[str, Written] = {}
    try:
        params = {**flatten(config), **{k: str(v) for k, v in job.choices.items()}}
        subject, cache = load_subject(
            cfg,
            components,
            model=model,
            tokenizer=tokenizer,
            batches=batches,
            image_shape=image_shape,
            example_inputs=example_inputs,
        )
        if cache:
            tracker_run.set_tags({"modelxray.model_cache": cache})
        check_task(subject, components.analyzers, components.quant)
        preflight(subject, components.analyzers)
        params.update(subject.info.as_params())
        if resume_id is None:  # a resumed run has its params (MLflow refuses a changed value)
            tracker_run.log_params(params)
            identity = identify(subject.data, components.dataset)
            if identity is not None:
                tracker_run.log_dataset(identity)
        earlier = _earlier_results(tracker_run, out_dir, components.analyzers, done)

        if components.train is not None:
            from modelxray.training.run import train_subject

            subject, results["train"] = train_subject(
                subject, components.train, tracker_run, out_dir, progress=cfg.progress
            )
        pending = [n for n in components.analyzers if n not in earlier]
        if pending and _keeps_reference(subject, components):
            from modelxray.measure.reference_outputs import capture

            subject = dataclasses.replace(subject, reference=capture(subject))
        in_place = _quantize_in_place(cfg, job, components, given_model=model is not None)
        if in_place:  # the cache must not hand the quantized model to a later run as the loaded one
            process_cache.evict(components.model)
        subject, quant_report = components.quant.apply(subject, progress=cfg.progress, in_place=in_place)
        if quant_report is not None:
            quant_report.insights.append(_in_place_note(in_place, cfg, job, components, model is not None))
            quant_report.seconds = quant_report.metrics.get("seconds", 0.0)
            results["quant"] = quant_report
            _keep("quant", quant_report, out_dir, tracker_run, written)
        ctx = RunContext(
            output_dir=out_dir,
            seed=cfg.seed,
            progress=cfg.progress,
            original_weights=OmegaConf.select(cfg, "runtime.original_weights", default="auto"),
        )
        finished = [n for n in components.analyzers if n in earlier]
        for name, analyzer in components.analyzers.items():
            if name in earlier:
                results[name] = earlier[name]
                continue
            results[name] = _run_one(name, analyzer, subject, ctx)
            _keep(name, results[name], out_dir, tracker_run, written)
            if results[name].ok:  # a failed analyzer runs again when the run is resumed
                finished.append(name)
                tracker_run.set_tags({DONE_TAG: ",".join(finished)})

        run_info = _run_info(config, job, subject, tracker_run.describe())
        write_reports(
            out_dir,
            run_info,
            results,
            dashboard=OmegaConf.select(cfg, "report.dashboard", default=True),
            written=written,
        )
        metrics = {f"{name}/{k}": v for name, r in results.items() for k, v in r.finite_metrics().items()}
        metrics.update({f"{name}/seconds": r.seconds for name, r in results.items()})
        tracker_run.log_metrics(
            {
                k: v
                for k, v in metrics.items()
                if k.split("/", 1)[0] not in written and k.split("/", 1)[0] not in earlier
            }
        )
        keep_checkpoints = components.train is not None and components.train.log_checkpoints
        tracker_run.log_artifacts(out_dir, exclude=() if keep_checkpoints else ("checkpoints",))
        tracker_run.finish("FAILED" if any(not r.ok for r in results.values()) else "FINISHED")
    except BaseException as exc:
        tb = traceback.format_exc()
        (out_dir / "errors").mkdir(exist_ok=True)
        (out_dir / "errors" / "run_traceback.txt").write_text(tb)
        try:
            tracker_run.log_text(tb, "errors/run_traceback.txt")
        finally:
            tracker_run.finish("KILLED" if isinstance(exc, (KeyboardInterrupt, JobKilled)) else "FAILED")
        raise
    return RunOutcome(
        metrics, results, out_dir, tracker_run.run_id, tracker_run.describe(), view=_view_hint(tracker_run)
    )


def load_subject(
    cfg: DictConfig,
    components,
    *,
    model: torch.nn.Module | None = None,
    tokenizer: Any = None,
    batches: Any = None,
    image_shape: tuple | None = None,
    example_inputs: Any = None,
    load_dataset: bool = True,
) -> tuple[Subject, str | None]:
    """The model under analysis with its data: the configured model (through the process cache:
    returns ``"hit"`` or ``"miss"``) or the given module, on the user's batches, else the configured
    dataset fitted to the model (images resized, a dual encoder bound to the class prompts), else a
    generic model's example inputs."""
    cache = None
    if model is None:
        loaded, hit = process_cache.lookup(components.model, cfg.model_cache_size)
        cache = "hit" if hit else "miss"
    else:
        loaded = _in_memory(model, tokenizer, image_shape, example_inputs)
    needs_data = (
        load_dataset
        and batches is None
        and components.dataset is not None
        and loaded.task not in ("weights", "generic")
    )
    if needs_data:
        _check_dataset_kind(components.dataset, loaded)
    data = components.dataset.load(loaded.tokenizer) if needs_data else None
    if batches is not None and loaded.task == "classification":  # images and labels: the split to score
        from modelxray.data.loader_data import classification_from_loader

        data, batches = classification_from_loader(batches), None
    if data is not None and loaded.image_shape is not None:
        data = _fit_images(data, loaded)
        loaded = _bind_class_prompts(data, loaded)
    if loaded.task == "generic":
        data = _keyed_inputs(loaded)
    subject = Subject(loaded.model, loaded.tokenizer, data, loaded.info, task=loaded.task, batches=batches)
    return subject, cache


def _resume_point(cfg: DictConfig, tracker, config_hash: str) -> tuple[str | None, Any]:
    """Where this run starts: ``("finished", (run id, metrics))`` when ``runtime.skip_finished`` finds
    the config FINISHED; ``(run id, analyzers done)`` to continue a run that stopped part-way (the one
    ``runtime.resume`` names, or the newest such run of this config under ``skip_finished``); else
    ``(None, [])``, a new run."""
    explicit = OmegaConf.select(cfg, "runtime.resume", default=None)
    if explicit:
        return str(explicit), tracker.resumable(str(explicit), config_hash)
    if not OmegaConf.select(cfg, "runtime.skip_finished", default=False):
        return None, []
    found = tracker.find_finished(config_hash)
    if found is not None:
        return "finished", found
    return tracker.find_resumable(config_hash) or (None, [])


def _earlier_results(tracker_run, out_dir: Path, analyzers: dict, done: list[str]) -> dict[str, Result]:
    """The results a resumed run finished before, loaded from its saved ``results/<name>.json`` and
    drawn by this run's analyzers; an analyzer whose file cannot be read runs again."""
    from modelxray.report.result_file import load_result

    wanted = [n for n in done if n in analyzers]
    out = {}
    for name, path in tracker_run.fetch_results(out_dir, wanted).items():
        try:
            out[name] = load_result(path, source=analyzers[name])
        except (OSError, ValueError, KeyError) as exc:
            log.warning("Running %s again: its saved result %s cannot be read (%s)", name, path, exc)
    return out


def _keep(name: str, result: Result, out_dir: Path, tracker_run, written: dict[str, Written]) -> None:
    """Save one stage the moment it ends: its files in the run directory (``results/<name>.json``,
    tables, plots) and its metrics and files in the tracker, so a later crash loses none of it."""
    written[name] = write_result(out_dir, name, result)
    tracker_run.log_metrics(
        {**{f"{name}/{k}": v for k, v in result.finite_metrics().items()}, f"{name}/seconds": result.seconds}
    )
    tracker_run.log_files(out_dir, written[name].paths)


def _keyed_inputs(loaded: LoadedModel) -> Any:
    """A generic model's example inputs keyed by the names its ``forward`` takes (declared names
    that are not its parameter names go onto its positional arguments, in order)."""
    from modelxray.data.example_inputs import ExampleInputs
    from modelxray.inspection.inputs import infer_input

    given = loaded.example_inputs
    spec = infer_input(
        loaded.model, batch_size=1, seq_len=None, input_shape=None, inputs=given.spec, key="model.inputs"
    )
    tensors = dict(zip(spec["arguments"], given.tensors.values()))
    how = "by keyword" if spec["call"] == "keyword" else f"onto forward({', '.join(spec['arguments'])}) in order"
    return ExampleInputs(tensors, given.source, f"{given.description}, passed {how}", meta={"call": spec["call"]})


def _quantize_in_place(cfg: DictConfig, job: JobInfo, components, given_model: bool) -> bool:
    """Quantize the loaded model itself, not a copy, when nothing needs its loaded weights after the
    quant stage: a configured model (never the user's own module) in a single run, or with the
    model cache off (``model_cache_size=0``); a sweep's jobs share the cached model."""
    if given_model or not getattr(components.quant, "in_place_capable", False):
        return False
    return job.sweep_dir is None or cfg.model_cache_size == 0


def _in_place_note(in_place: bool, cfg: DictConfig, job: JobInfo, components, given_model: bool) -> str:
    """What the quant stage kept of the loaded weights, and why, for the report."""
    if in_place:
        why = "model_cache_size=0" if cfg.model_cache_size == 0 else "a single run"
        return (
            f"Memory: quantized in place ({why}): the loaded weights were not kept, so the process held one "
            "copy of the model."
        )
    if given_model:
        why = "your model is left as you gave it"
    elif not getattr(components.quant, "in_place_capable", False):
        why = f"{components.quant.name} builds new modules"
    else:
        why = "the jobs of this sweep share the loaded model (model_cache_size=0 quantizes in place)"
    return f"Memory: quantized a copy of the model, which kept the loaded weights beside it: {why}."


def _keeps_reference(subject: Subject, components) -> bool:
    """Keep the unquantized outputs when a quantizer runs and an analyzer scores agreement with them
    (performance on a classifier or a generic model; quant_impact and bitwidth keep their own)."""
    quantizes = getattr(components.quant, "name", "none") != "none"
    return quantizes and subject.task in ("classification", "generic") and "performance" in components.analyzers


def _check_dataset_kind(dataset: Any, loaded: LoadedModel) -> None:
    """Text for a language model, labelled examples for a classifier: checked before any data loads."""
    from modelxray.data.base import TextDataset

    if loaded.task == "classification" and isinstance(dataset, TextDataset):
        raise ConfigError(
            "dataset",
            f"{dataset.name} is text and {loaded.info.name} is a classification model; use dataset=digits",
        )


def _fit_images(data: Any, loaded: LoadedModel) -> Any:
    """Images resized to what an image model expects, and a class count its head can score."""
    from modelxray.data.base import ClassificationData
    from modelxray.data.images import fit_images, match_labels

    if not isinstance(data, ClassificationData):
        return data  # check_task names the datasets that fit
    if _is_zero_shot(loaded):  # no head: it scores whatever classes the dataset names
        return fit_images(data, loaded.image_shape, loaded.info.name)
    config = getattr(loaded.model, "config", None)
    data = match_labels(data, getattr(config, "label2id", None), loaded.info.name)
    labels = getattr(config, "num_labels", None)
    if labels is not None and labels < data.n_classes:
        raise ConfigError(
            "dataset",
            f"{data.name} has {data.n_classes} classes and {loaded.info.name} scores {labels}; "
            "use a model with at least as many labels",
        )
    return fit_images(data, loaded.image_shape, loaded.info.name)


def _is_zero_shot(loaded: LoadedModel) -> bool:
    from modelxray.models.vision_language import ZeroShotClassifier

    return isinstance(loaded.model, ZeroShotClassifier)


def _bind_class_prompts(data: Any, loaded: LoadedModel) -> LoadedModel:
    """A dual encoder (CLIP, SigLIP) as the zero-shot classifier of the dataset's classes: one prompt
    per class name (``model.prompt_template``, else the dataset's). A copy: the cached model stays unbound."""
    import dataclasses

    from modelxray.data.base import ClassificationData
    from modelxray.models.vision_language import zero_shot_notes

    if not _is_zero_shot(loaded) or not isinstance(data, ClassificationData):
        return loaded
    names = data.meta.get("class_names")
    if not names or len(names) != data.n_classes:
        raise ConfigError(
            "dataset",
            f"{data.name} names no classes (meta class_names); {loaded.info.name} is a vision-language model "
            "that classifies by class-name prompts: use dataset=digits or dataset=image_folder",
        )
    model = loaded.model.for_classes(list(names), loaded.tokenizer, data.meta.get("prompt_template"))
    info = dataclasses.replace(loaded.info, notes=[*loaded.info.notes, *zero_shot_notes(model)])
    return dataclasses.replace(loaded, model=model, info=info)


def check_task(subject: Subject, analyzers: dict, quant=None) -> None:
    """The dataset, the quantizer and every analyzer must fit the kind of model: a language model,
    a classifier, or weights alone (a weights-only file, which cannot run)."""
    from modelxray.data.base import ClassificationData, TokenData

    wanted = {"causal_lm": TokenData, "classification": ClassificationData}.get(subject.task)
    if subject.data is not None and wanted is not None and not isinstance(subject.data, wanted):
        hint = "dataset=digits" if subject.task == "classification" else "a text dataset, e.g. dataset=pydoc_topics"
        raise ConfigError(
            "dataset",
            f"{type(subject.data).__name__} does not fit a {subject.task} model ({subject.info.name}); use {hint}",
        )
    hints = {
        "causal_lm": "analyzer=performance, robustness, quant_impact, bitwidth or inspect",
        "classification": "analyzer=performance, robustness, quant_impact, bitwidth or inspect",
        "weights": "analyzer=inspect, or set model.architecture so the model can run",
        "generic": "analyzer=performance or inspect (a generic model has example inputs, no labels or tokens)",
    }
    for name, analyzer in analyzers.items():
        if subject.task not in analyzer.tasks:
            raise ConfigError(
                f"analyzer.{name}",
                f"analyzes {' and '.join(analyzer.tasks)} models, and "
                f"{subject.info.name} is a {subject.task} model; use "
                f"{hints.get(subject.task, 'another analyzer')}",
            )
    if subject.task == "weights" and quant is not None and getattr(quant, "name", "none") != "none":
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


def _run_one(name: str, analyzer, subject: Subject, ctx: RunContext) -> Result:
    """Run one analyzer; a failure becomes a Result carrying its traceback, so the others still run."""
    start = time.perf_counter()
    try:
        result = analyzer.run(subject, ctx)
    except Exception:  # noqa: BLE001 - recorded and reported, never lost
        result = Result(name, error=traceback.format_exc(), source=analyzer)
    result.analyzer = name
    result.seconds = time.perf_counter() - start
    return result


def _run_info(config: dict, job: JobInfo, subject: Subject, tracking: str) -> dict[str, Any]:
    data = subject.data
    if data is None:
        dataset = "user-supplied batches"
    elif subject.task == "generic":
        dataset = f"{data.name}: {data.description}; from {data.source}"
    elif hasattr(data, "n_tokens"):
        dataset = f"{data.name}: {data.n_tokens:,} of {data.available_tokens:,} tokens, windows of {data.seq_len}"
        if getattr(data, "note", None):  # e.g. a text shorter than one window
            dataset += f" ({data.note})"
    else:
        dataset = (
            f"{data.name}: {data.n_samples:,} test samples of shape {tuple(data.input_shape)}, "
            f"{data.n_classes} classes (trained on {len(data.y_train):,})"
        )
    quant = "; ".join(str(s) for s in subject.applied if s.get("kind") != "train") or "none (weights as loaded)"
    trained = [s for s in subject.applied if s.get("kind") == "train"]
    training = (
        (
            f"{trained[0]['steps']} {trained[0]['optimizer']} steps at lr {trained[0]['lr']:g}"
            + (" (LoRA)" if trained[0]["lora"] else "")
            + " before the analyzers ran"
        )
        if trained
        else None
    )
    return {
        "model": asdict(subject.info),
        "dataset": dataset,
        "quant": quant,
        "training": training,
        "choices": job.choices,
        "overrides": job.overrides,
        "tracking": tracking,
        "host": host(),
        "versions": versions(),
        "output_dir": str(job.output_dir),
        "config": config,
    }
