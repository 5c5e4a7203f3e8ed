"""``run(cfg, job)``: one run's stages in order (load, check, train, quantize, analyze, report,
track), each stage's files and metrics kept the moment it ends (``keep_stage``) so a crash loses none
of them. ModelAnalyzer runs single stages with ``run_stage`` and ``keep_stage``."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import random
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from modelxray.app.checks import check_before_load, check_finite_weights, check_task, preflight
from modelxray.app.job import JobInfo, RunOutcome, config_fingerprint, flatten
from modelxray.app.loading import load_subject
from modelxray.app.quant_stage import _in_place_note, _keeps_reference, _quantize_in_place
from modelxray.app.resume import _earlier_results, _resume_point
from modelxray.config.components import build_components
from modelxray.core.errors import ConfigError, JobKilled
from modelxray.core.provenance import host, versions
from modelxray.core.result import Result, RunContext
from modelxray.core.subject import Subject
from modelxray.data.identity import identify
from modelxray.models import process_cache
from modelxray.models.kinds import SPEECH_KINDS, TEXT_KINDS
from modelxray.report.writer import Written, write_reports, write_result
from modelxray.tracking.mlflow_tracker import DONE_TAG, PID_TAG, store_key
from modelxray.tracking.run_names import run_name as readable_run_name
from modelxray.tracking.run_tags import SWEPT_KEYS_ENV, run_tags

log = logging.getLogger(__package__)  # log lines keep the name modelxray.app


def _view_hint(tracker_run) -> str:
    try:
        return tracker_run.view_hint()
    except Exception:  # noqa: BLE001 - a link is a convenience; the run is logged
        return ""


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def run(cfg: DictConfig, job: JobInfo, **given: Any) -> RunOutcome:
    """Run the configured analyzers on the configured (or given) model and record everything. A new
    run enters the store once the model and data are loaded and checked: bad input found while
    loading leaves none behind (a crash while loading does leave a FAILED run, with its traceback).
    ``threads`` holds for the run only: a Python caller's torch keeps its own thread count after it."""
    threads = torch.get_num_threads()
    try:
        return _run(cfg, job, **given)
    finally:
        torch.set_num_threads(threads)


def _run(
    cfg: DictConfig,
    job: JobInfo,
    *,
    model: torch.nn.Module | None = None,
    tokenizer: Any = None,
    batches: Any = None,
    image_shape: tuple[int, int, int] | None = None,
    example_inputs: Any = None,
    processor: Any = None,
) -> RunOutcome:
    given = (tokenizer, batches, image_shape, example_inputs, processor)
    if model is not None and all(g is None for g in given) and not _vision_kind(model):
        raise ConfigError(
            "tokenizer",
            "an in-memory model needs a tokenizer or a dataloader of token batches (a language model), "
            "image_shape (an image classifier), a processor (a transformers detector, segmenter, vision-language "
            "or speech model) or example_inputs (any other module)",
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
    tracker_run = None  # a new run is started once the model and data are loaded and checked
    if resume_id is not None:
        tracker_run = components.tracker.resume(resume_id, {**tags, "modelxray.resumed_analyzers": ",".join(done)})
        tracker_run.record(out_dir)
        log.info("Resuming run %s: %s finished there and are not run again", resume_id, ", ".join(done))
    results: dict[str, Result] = {}
    written: dict[str, Written] = {}
    try:
        params = {**flatten(config), **{k: str(v) for k, v in job.choices.items()}}
        earlier = {}
        if tracker_run is not None:  # before the model loads
            earlier = _earlier_results(tracker_run, out_dir, components.analyzers, done)
        if model is None:
            chosen = any(o.lstrip("+").partition("=")[0] == "dataset" for o in job.overrides)
            check_before_load(components.model, components.dataset, dataset_chosen=chosen)
        subject, cache = load_subject(
            cfg,
            components,
            model=model,
            tokenizer=tokenizer,
            batches=batches,
            image_shape=image_shape,
            example_inputs=example_inputs,
            processor=processor,
        )
        check_task(subject, components.analyzers, components.quant)
        check_finite_weights(subject.model, components.analyzers)
        preflight(subject, components.analyzers)
        if tracker_run is None:  # bad input found while loading leaves no run in the store
            tracker_run = components.tracker.start(run_name, tags)
            tracker_run.record(out_dir)
        if cache:
            tracker_run.set_tags({"modelxray.model_cache": cache})
        tracker_run.set_tags(kind_tags(subject, run_name, resumed=resume_id is not None))
        params.update(subject.info.as_params())
        if resume_id is None:  # a resumed run has its params (MLflow refuses a changed value)
            tracker_run.log_params(params)
            identity = identify(subject.data, components.dataset)
            if identity is not None:
                tracker_run.log_dataset(identity)

        if components.train is not None:
            from modelxray.training.run import train_subject

            subject, results["train"] = train_subject(
                subject, components.train, tracker_run, out_dir, progress=cfg.progress
            )
        pending = [n for n in components.analyzers if n not in earlier]
        reference_error = None  # the unquantized outputs could not be computed: performance fails, the rest run
        if pending and _keeps_reference(subject, components):
            from modelxray.measure.reference_outputs import capture

            try:
                reference = capture(subject, components.analyzers.get("performance"))
                subject = dataclasses.replace(subject, reference=reference)
            except Exception:  # noqa: BLE001 - recorded as performance's failure, never the whole run's
                reference_error = "the unquantized model's outputs could not be computed:\n" + traceback.format_exc()
        in_place = _quantize_in_place(cfg, job, components, given_model=model is not None)
        if in_place:  # the cache must not hand the quantized model to a later run as the loaded one
            process_cache.evict(components.model)
        subject, quant_report = components.quant.apply(subject, progress=cfg.progress, in_place=in_place)
        if quant_report is not None:
            quant_report.insights.append(_in_place_note(in_place, cfg, job, components, model is not None))
            quant_report.seconds = quant_report.metrics.get("seconds", 0.0)
            results["quant"] = quant_report
            keep_stage("quant", quant_report, out_dir, tracker_run, written)
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
            if name == "performance" and reference_error is not None:
                results[name] = Result(name, error=reference_error, source=analyzer)
            else:
                results[name] = run_stage(name, analyzer, subject, ctx)
            keep_stage(name, results[name], out_dir, tracker_run, written)
            if results[name].ok:  # a failed analyzer runs again when the run is resumed
                finished.append(name)
                tracker_run.set_tags({DONE_TAG: ",".join(finished)})

        run_info = run_summary(config, job, subject, tracker_run.describe())
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
        if isinstance(exc, (KeyboardInterrupt, JobKilled)) and hasattr(tracker_run, "hurry"):
            tracker_run.hurry()  # a stopped process ends in seconds, whatever the server does
        tb = traceback.format_exc()
        stopped = isinstance(exc, (KeyboardInterrupt, JobKilled))
        if tracker_run is None and (stopped or isinstance(exc, ConfigError)):
            raise  # bad input found while loading (its one line), or a stop before any analysis: no run
        with contextlib.suppress(OSError):  # a full disk: the run still ends FAILED, its traceback in the store
            (out_dir / "errors").mkdir(exist_ok=True)
            (out_dir / "errors" / "run_traceback.txt").write_text(tb)
        if tracker_run is None:  # a crash while loading is recorded: a FAILED run with its traceback
            tracker_run = components.tracker.start(run_name, tags)
            tracker_run.record(out_dir)
        try:
            tracker_run.log_text(tb, "errors/run_traceback.txt")
        finally:
            tracker_run.finish("KILLED" if stopped else "FAILED")
        raise
    return RunOutcome(
        metrics, results, out_dir, tracker_run.run_id, tracker_run.describe(), view=_view_hint(tracker_run)
    )


def kind_tags(subject: Subject, run_name: str, resumed: bool = False) -> dict[str, str]:
    """``modelxray.kind`` and ``modelxray.task`` (the UI filters runs by them); the run of an encoder,
    seq2seq or speech model also says its kind in its name (a resumed run keeps its name)."""
    kind = subject.kind or subject.task
    tags = {"modelxray.kind": kind, "modelxray.task": subject.task}
    if subject.kind in (*TEXT_KINDS, *SPEECH_KINDS) and not resumed:
        tags["mlflow.runName"] = f"{run_name} {kind}"
    return tags


def keep_stage(name: str, result: Result, out_dir: Path, tracker_run, written: dict[str, Written]) -> None:
    """Save one stage the moment it ends: its files in the run directory (``results/<name>.json``,
    tables, plots) and its metrics and files in the tracker, so a later crash loses none of it."""
    tracker_run.log_metrics(  # the numbers first: a file that cannot be written loses none of them
        {**{f"{name}/{k}": v for k, v in result.finite_metrics().items()}, f"{name}/seconds": result.seconds}
    )
    written[name] = write_result(out_dir, name, result)
    tracker_run.log_files(out_dir, written[name].paths)


def run_stage(name: str, analyzer, subject: Subject, ctx: RunContext) -> Result:
    """Run one analyzer; a failure becomes a Result carrying its traceback, so the others still run."""
    start = time.perf_counter()
    try:
        result = analyzer.run(subject, ctx)
    except Exception:  # noqa: BLE001 - recorded and reported, never lost
        result = Result(name, error=traceback.format_exc(), source=analyzer)
    result.analyzer = name
    result.seconds = time.perf_counter() - start
    return result


def _vision_kind(model: torch.nn.Module) -> bool:
    """A transformers detector, segmenter or backbone: it needs nothing beside itself (a detector says
    in one line that it needs its image processor)."""
    from modelxray.models.kinds import VISION_KINDS, kind_of_architecture

    return hasattr(model, "config") and kind_of_architecture(type(model).__name__) in VISION_KINDS


def run_summary(config: dict, job: JobInfo, subject: Subject, tracking: str) -> dict[str, Any]:
    """What the report's header says of the run: model, dataset, quantization, training, choices."""
    data = subject.data
    if data is None:
        dataset = "user-supplied batches"
    elif subject.task == "generic":
        dataset = f"{data.name}: {data.description}; from {data.source}"
    elif hasattr(data, "windows") or hasattr(data, "images"):  # a text, speech or vision task's own examples
        dataset = f"{data.name}: {data.description}"
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
