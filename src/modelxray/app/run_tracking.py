"""The stages of a run that speak to the tracking store: opening the run with its tags, params and
dataset once the model is loaded and checked, ending it with the metrics no stage logged, its files
and its status, and recording a run that failed (with its traceback) or was stopped."""

from __future__ import annotations

import contextlib
import os
import traceback
from typing import TYPE_CHECKING

from modelxray.app.quant_stage import stream_metrics
from modelxray.app.summary import kind_tags
from modelxray.core.errors import ConfigError, JobKilled
from modelxray.data.identity import identify
from modelxray.models.device_map import placements
from modelxray.report.headline import description, headline, headline_metrics
from modelxray.tracking.run_tags import PARENT_RUN_ENV

if TYPE_CHECKING:
    from modelxray.app.run_state import RunState


def view_hint(tracker_run) -> str:
    try:
        return tracker_run.view_hint()
    except Exception:  # noqa: BLE001 - a link is a convenience; the run is logged
        return ""


def start_tracking(state: RunState) -> None:
    """Open the run in the store (a resumed run is open already), with its tags, params and dataset."""
    if state.tracker_run is None:
        state.tracker_run = state.components.tracker.start(state.run_name, state.tags)
        state.tracker_run.record(state.out_dir)
    elif "modelxray.model_cache" in state.tags:
        state.tracker_run.set_tags({"modelxray.model_cache": state.tags["modelxray.model_cache"]})
    state.tracker_run.set_tags(kind_tags(state.subject, state.run_name, resumed=state.resume_id is not None))
    state.params.update(state.subject.info.as_params())
    if state.offload is not None:
        state.params.update(state.offload.params())
    placed = placements(state.subject.model)
    if placed:  # where accelerate put the modules (model.device_map)
        state.params["runtime/device_map"] = ", ".join(f"{where}: {n} modules" for where, n in placed.items())
    if state.resume_id is None:  # a resumed run has its params (MLflow refuses a changed value)
        state.tracker_run.log_params(state.params)
        identity = identify(state.subject.data, state.components.dataset)
        if identity is not None:
            state.tracker_run.log_dataset(identity)


def _links(state: RunState) -> list[tuple[str, str]]:
    """The run description's links: the sweep's parent run, which holds the comparison of its jobs."""
    parent = os.environ.get(PARENT_RUN_ENV)
    link = state.tracker_run.run_link(parent) if parent else None
    return [("The sweep's comparison of its jobs (comparison.md, in the parent run's artifacts)", link)] if link else []


def finish_tracking(state: RunState) -> None:
    """The metrics no stage logged yet, the report's files, and the run's end status."""
    results, earlier = state.results, state.earlier
    metrics = {f"{name}/{k}": v for name, r in results.items() for k, v in r.finite_metrics().items()}
    metrics.update({f"{name}/seconds": r.seconds for name, r in results.items()})
    state.metrics = metrics
    if state.subject is not None and state.subject.stream is not None:
        metrics.update(stream_metrics(state.subject.stream))
    size = next((metrics[k] for k in ("quant/model_bytes_after", "performance/param_bytes") if k in metrics), None)
    if size is not None:  # one size axis for quantized and unquantized runs alike
        metrics["model/size_bytes"] = size
    report = state.components.settings.report
    figures = headline(metrics, list(report.headline))
    metrics.update(headline_metrics(figures))
    unlogged = {k: v for k, v in metrics.items() if k.split("/", 1)[0] not in (*state.written, *earlier)}
    state.tracker_run.log_metrics(unlogged)
    state.tracker_run.set_description(description(state.run_name, figures, _links(state)))
    train = state.components.train
    keep_checkpoints = train is not None and train.log_checkpoints
    state.tracker_run.log_artifacts(state.out_dir, exclude=() if keep_checkpoints else ("checkpoints",))
    state.tracker_run.finish("FAILED" if any(not r.ok for r in results.values()) else "FINISHED")


def record_failure(state: RunState, exc: BaseException) -> None:
    """A stage raised: bad input found while loading, or a stop before the run was opened, leaves no
    run; anything else ends the run FAILED (KILLED when stopped) with its traceback in the store."""
    tracker_run = state.tracker_run
    stopped = isinstance(exc, (KeyboardInterrupt, JobKilled))
    if stopped and hasattr(tracker_run, "hurry"):
        tracker_run.hurry()  # a stopped process ends in seconds, whatever the server does
    tb = traceback.format_exc()
    if tracker_run is None and (stopped or isinstance(exc, ConfigError) or state.stage == "resume"):
        return  # bad input found while loading (its one line), a stop before any analysis, or a store
        # that could not be asked whether to resume: no run
    with contextlib.suppress(OSError):  # a full disk: the run still ends FAILED, its traceback in the store
        (state.out_dir / "errors").mkdir(exist_ok=True)
        (state.out_dir / "errors" / "run_traceback.txt").write_text(tb)
    if tracker_run is None:  # a crash while loading is recorded: a FAILED run with its traceback
        tracker_run = state.tracker_run = state.components.tracker.start(state.run_name, state.tags)
        tracker_run.record(state.out_dir)
    try:
        tracker_run.log_text(tb, "errors/run_traceback.txt")
    finally:
        tracker_run.finish("KILLED" if stopped else "FAILED")
