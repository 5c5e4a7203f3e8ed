"""``run(cfg, job)``: one run's stages in order (load, check, train, quantize, analyze, report,
track), each stage's files and metrics kept the moment it ends (``keep_stage``) so a crash loses none
of them. ModelAnalyzer runs single stages with ``run_stage`` and ``keep_stage``."""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import random
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from modelxray.app.checks import (
    check_before_load,
    check_disk_placement,
    check_finite_weights,
    check_task,
    check_trial_forward,
    preflight,
)
from modelxray.app.given import Given
from modelxray.app.job import JobInfo, RunOutcome, config_fingerprint, flatten
from modelxray.app.loading import defer_optional_libraries, load_subject
from modelxray.app.offload import choose_offload
from modelxray.app.quant_stage import (
    _in_place_note,
    _keeps_reference,
    _quantize_in_place,
    quantize_streamed,
    streamed_quant_result,
)
from modelxray.app.reference_model import (
    baseline_specs,
    check_against,
    check_reference_use,
    paired_specs,
    reference_outputs,
    reference_weights,
    unquantized_outputs,
)
from modelxray.app.resume import _earlier_results, _resume_point
from modelxray.app.run_state import RunState
from modelxray.app.run_tracking import finish_tracking, record_failure, start_tracking, view_hint
from modelxray.app.stage_results import keep_stage, run_stage
from modelxray.app.summary import run_summary
from modelxray.config.components import build_components
from modelxray.core.cpus import busy_at_start, cpu_budget, free_threads
from modelxray.core.errors import ConfigError
from modelxray.core.result import Result, RunContext
from modelxray.kinds.table import kind_of
from modelxray.models import process_cache
from modelxray.models.device_map import offloaded, on_disk
from modelxray.report.writer import write_reports
from modelxray.tracking.run_names import run_name as readable_run_name
from modelxray.tracking.run_tags import SWEEP_ID_ENV, SWEPT_KEYS_ENV, run_tags, store_key

log = logging.getLogger(__package__)  # log lines keep the name modelxray.app


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def run(cfg: DictConfig, job: JobInfo, **given: Any) -> RunOutcome:
    """Run the configured analyzers on the configured (or given) model and record everything, one
    named stage after another (``STAGES``). A new run enters the store once the model and data are
    loaded and checked: bad input found while loading leaves none behind (a crash while loading does
    leave a FAILED run, with its traceback). ``threads`` holds for the run only: a Python caller's
    torch keeps its own thread count after it."""
    threads, frozen = torch.get_num_threads(), False
    try:
        state = _prepare(cfg, job, Given(**given))
        defer_optional_libraries(state.components, state.given.model is not None)
        try:
            for state.stage, stage in STAGES:
                stage(state)
                if state.skipped is not None:
                    return state.skipped
                if stage is start_tracking:
                    # the libraries and the model are loaded: the garbage collector's full passes skip
                    # their millions of objects from here on (seconds over a long training loop)
                    gc.freeze()
                    frozen = True
        except BaseException as exc:
            record_failure(state, exc)
            raise
        return RunOutcome(
            state.metrics,
            state.results,
            state.out_dir,
            state.tracker_run.run_id,
            state.tracker_run.describe(),
            view=view_hint(state.tracker_run),
        )
    finally:
        if frozen:
            gc.unfreeze()  # what the run left behind is collected as usual again
        torch.set_num_threads(threads)


def default_threads() -> int:
    """torch's default (the physical cores) capped by the CPUs this process may use, less the share
    other processes kept busy as it started: more threads than free cores wait for each other."""
    import psutil

    usable = cpu_budget().cpus
    return free_threads(min(usable, psutil.cpu_count(logical=False) or usable), busy_at_start())


def _prepare(cfg: DictConfig, job: JobInfo, given: Given) -> RunState:
    """Check what was given, build every component from the config (bad values fail here, in one
    line), set threads and seeds, and name and tag the run-to-be."""
    given.check()
    components = build_components(cfg, skip_model=given.model is not None, skip_dataset=given.batches is not None)
    check_reference_use(components)
    settings = components.settings
    torch.set_num_threads(settings.threads or default_threads())
    _seed_everything(settings.seed)
    logging.getLogger("torchao").setLevel(logging.ERROR)  # warns about its CUDA-only extensions on CPU
    # torchao (imported by transformers when installed) registers enums torch now warns about
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)
    out_dir = Path(job.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = OmegaConf.to_container(cfg, resolve=True)
    config.pop("hydra", None)
    swept = tuple(os.environ.get(SWEPT_KEYS_ENV, "").split(",")) if job.sweep_dir is not None else ()
    tags = run_tags(job.overrides, job.sweep_dir, job.job_num, store_key(components.tracker))
    config_hash = config_fingerprint(config)
    tags["modelxray.config_hash"] = config_hash
    return RunState(
        cfg=cfg,
        job=job,
        given=given,
        components=components,
        config=config,
        out_dir=out_dir,
        run_name=readable_run_name(job.choices, job.overrides, config, swept),
        tags=tags,
        config_hash=config_hash,
        params={**flatten(config), **{k: str(v) for k, v in job.choices.items()}},
    )


def _resume(state: RunState) -> None:
    """Skip a config that FINISHED before (``runtime.skip_finished``), or reopen the run that stopped
    part-way and load back the results of the analyzers it finished, before the model loads."""
    tracker = state.components.tracker
    state.resume_id, state.done = _resume_point(state.components.settings.runtime, tracker, state.config_hash)
    if state.resume_id == "finished":
        run_id, metrics = state.done
        sweep_id = os.environ.get(SWEEP_ID_ENV) if state.job.sweep_dir is not None else None
        if sweep_id and hasattr(tracker, "store_uri"):  # the new sweep's comparison lists the run it reused
            from modelxray.tracking.sweep_runs import mark_reused

            mark_reused(tracker.store_uri, run_id, sweep_id)
        state.skipped = RunOutcome(
            metrics, {}, state.out_dir, run_id, f"skipped: FINISHED before as run {run_id}", skipped=True
        )
        return
    if state.resume_id is not None:
        tags = {**state.tags, "modelxray.resumed_analyzers": ",".join(state.done)}
        state.tracker_run = tracker.resume(state.resume_id, tags)
        state.tracker_run.record(state.out_dir)
        log.info("Resuming run %s: %s finished there and are not run again", state.resume_id, ", ".join(state.done))
        state.earlier = _earlier_results(state.tracker_run, state.out_dir, state.components.analyzers, state.done)


def _reference_model(state: RunState) -> None:
    """``reference=file|hf|gguf``: the reference's outputs on the run's data, before the model under
    analysis loads (read from the reference cache when computed before)."""
    components = state.components
    if components.reference is None or not (
        "performance" in components.analyzers or baseline_specs(components) or paired_specs(components)
    ):
        return  # inspect alone reads the reference's weights, not its outputs
    progress = state.components.settings.progress
    state.reference = reference_outputs(state.cfg, state.components, state.given, progress)
    state.tags["modelxray.reference"] = state.reference.name


def _load(state: RunState) -> None:
    """Check the model, data and analyzers fit each other from their declarations, load them, and
    check them again loaded (task, finite weights, each analyzer's preflight, one trial forward)."""
    components, given = state.components, state.given
    chosen = any(o.lstrip("+").partition("=")[0] == "dataset" for o in state.job.overrides)
    if given.model is None:
        check_before_load(components.model, components.dataset, dataset_chosen=chosen)
        device_map = getattr(components.model, "device_map", None)
        if on_disk(device_map):  # known before loading for a mapping: nothing is read
            check_disk_placement(
                [m for m, d in device_map.items() if d == "disk"], components.analyzers, components.quant
            )
        state.offload = choose_offload(components.settings.runtime, components)
    feeds = {f.name: getattr(given, f.name) for f in dataclasses.fields(given)}  # asdict would copy the model
    state.subject, cache = load_subject(state.cfg, components, dataset_chosen=chosen, offload=state.offload, **feeds)
    if state.subject.stream is not None:  # hidden states beyond the budget wait in the run's directory
        state.subject.stream.spill_dir = state.out_dir
    stands_in = None if chosen else kind_of(state.subject).default_dataset(components.dataset)
    if stands_in is not None:  # the default text stood for the kind's own data (an image classifier's digits)
        components = state.components = dataclasses.replace(components, dataset=stands_in[0])
    check_task(state.subject, components.analyzers, components.quant)
    check_disk_placement(offloaded(state.subject.model), components.analyzers, components.quant)
    check_finite_weights(state.subject.model, components.analyzers)
    preflight(state.subject, components.analyzers)
    check_trial_forward(state.subject)
    if state.reference is not None:
        specs = baseline_specs(components)
        check_against(state.reference, state.subject, components.analyzers.get("performance"), specs)
        state.subject = dataclasses.replace(
            state.subject, reference=state.reference.outputs, reference_baselines=state.reference.baselines
        )
    if components.reference is not None and "inspect" in components.analyzers:
        state.subject = dataclasses.replace(state.subject, reference_weights=reference_weights(components.reference))
    if cache:
        state.tags["modelxray.model_cache"] = cache


def _train(state: RunState) -> None:
    """``train=``: train the model before anything measures it."""
    train = state.components.train
    if train is None:
        return
    from modelxray.training.run import train_subject

    progress = state.components.settings.progress
    state.subject, state.results["train"] = train_subject(
        state.subject, train, state.tracker_run, state.out_dir, progress=progress
    )


def _keep_reference(state: RunState) -> None:
    """Before ``quant=`` changes the model, keep its outputs for the analyzers that score agreement
    (a language model's and a classifier's through the reference cache: a sweep computes them once)."""
    pending = [n for n in state.components.analyzers if n not in state.earlier]
    if state.reference is not None or not (pending and _keeps_reference(state.subject, state.components)):
        return  # another model is the reference, or nothing compares
    if state.subject.stream is not None:
        return  # a streamed model's float path runs beside its quantized one, block by block
    subject, components, given = state.subject, state.components, state.given
    try:
        if kind_of(subject).caches_reference and (subject.data is not None or subject.batches):
            cacheable = given.model is None and given.batches is None and components.train is None
            outputs = unquantized_outputs(subject, components, cacheable, components.settings.progress).outputs
        else:
            from modelxray.measure.reference_outputs import capture

            work = kind_of(subject).reference_work()
            outputs = capture(subject, components.analyzers.get("performance"), work=work)
        state.subject = dataclasses.replace(subject, reference=outputs)
    except Exception:  # noqa: BLE001 - recorded as performance's failure, never the whole run's
        state.reference_error = "the unquantized model's outputs could not be computed:\n" + traceback.format_exc()


def _keep_baselines(state: RunState) -> None:
    """Before ``quant=`` changes the model, what the analyzers that pair their figures with it keep of
    it (lm_eval: every document's scores); one that fails is recorded as that analyzer's failure."""
    quant = state.components.quant
    if getattr(quant, "name", "none") == "none" or state.reference is not None or state.subject.stream is not None:
        return
    settings = state.components.settings
    for name, analyzer in state.components.analyzers.items():
        if name in state.earlier:
            continue
        try:
            kept = analyzer.unquantized_baseline(state.subject, settings.seed)
        except ConfigError:
            raise
        except Exception:  # noqa: BLE001 - the analyzer runs without its pairing, and says why
            log.warning("%s: the unquantized model's baseline could not be computed:\n%s", name, traceback.format_exc())
            continue
        if kept is not None:
            baselines = {**state.subject.reference_baselines, name: kept}
            state.subject = dataclasses.replace(state.subject, reference_baselines=baselines)


def _quantize(state: RunState) -> None:
    """``quant=``: quantize the model (in place when nothing needs its loaded weights after)."""
    cfg, job, components = state.cfg, state.job, state.components
    if state.subject.stream is not None:
        state.subject = quantize_streamed(state.subject, components.quant, components.settings.progress)
        return
    given_model = state.given.model is not None
    in_place = _quantize_in_place(cfg, job, components, given_model=given_model)
    if in_place:  # the cache must not hand the quantized model to a later run as the loaded one
        process_cache.evict(components.model)
    progress = components.settings.progress
    state.subject, quant_report = components.quant.apply(state.subject, progress=progress, in_place=in_place)
    if quant_report is not None:
        if quant_report.insights and quant_report.insights[0].startswith("Warning: "):  # much was left float
            log.warning("%s", quant_report.insights[0].removeprefix("Warning: "))
        quant_report.insights.append(_in_place_note(in_place, cfg, job, components, given_model))
        quant_report.seconds = quant_report.metrics.get("seconds", 0.0)
        state.results["quant"] = quant_report
        keep_stage("quant", quant_report, state.out_dir, state.tracker_run, state.written)


def _analyze(state: RunState) -> None:
    """Each analyzer in turn, each kept the moment it ends; one that fails never stops the others."""
    settings = state.components.settings
    ctx = RunContext(
        output_dir=state.out_dir,
        seed=settings.seed,
        progress=settings.progress,
        original_weights=settings.runtime.original_weights,
    )
    finished = [n for n in state.components.analyzers if n in state.earlier]
    for name, analyzer in state.components.analyzers.items():
        if name in state.earlier:
            state.results[name] = state.earlier[name]
            continue
        if name == "performance" and state.reference_error is not None:
            state.results[name] = Result(name, error=state.reference_error, source=analyzer)
        else:
            state.results[name] = run_stage(name, analyzer, state.subject, ctx)
        keep_stage(name, state.results[name], state.out_dir, state.tracker_run, state.written)
        if state.results[name].ok:  # a failed analyzer runs again when the run is resumed
            finished.append(name)
            state.tracker_run.mark_finished(finished)


def _streamed_quant_report(state: RunState) -> None:
    """A streamed model was quantized block by block as the analyzers read it: its quant report is
    complete now (read once more, block by block, when no analyzer streamed it)."""
    stream = state.subject.stream if state.subject is not None else None
    if stream is None or stream.transform is None:
        return
    quant_report = streamed_quant_result(state.subject, state.components.settings.progress)
    state.results["quant"] = quant_report
    keep_stage("quant", quant_report, state.out_dir, state.tracker_run, state.written)


def _report(state: RunState) -> None:
    """The run's report directory: summary, insights, dashboard, over every stage's files."""
    run_info = run_summary(state.config, state.job, state.subject, state.tracker_run.describe())
    run_info["tracking_link"] = state.tracker_run.run_link()
    dashboard = state.components.settings.report.dashboard
    write_reports(state.out_dir, run_info, state.results, dashboard=dashboard, written=state.written)


STAGES = (  # one run, in order; each stage reads and extends the RunState
    ("resume", _resume),
    ("reference model", _reference_model),
    ("load", _load),
    ("start tracking", start_tracking),
    ("train", _train),
    ("keep reference outputs", _keep_reference),
    ("keep the analyzers' baselines", _keep_baselines),
    ("quantize", _quantize),
    ("analyze", _analyze),
    ("streamed quant report", _streamed_quant_report),
    ("report", _report),
    ("finish tracking", finish_tracking),
)
