"""Hydra callback run on the submitting host when a sweep (``-m``) starts and ends.

At the start it gives the sweep an id (``MODELXRAY_SWEEP_ID``: the environment reaches local,
submitit_local and SLURM jobs, which tag their MLflow runs with it) and prepares the tracking store
once: the SQLite schema and the experiment are created here, so parallel jobs never race to create
them. A store that cannot work (an unwritable SQLite folder, a dead server) stops the sweep here
with one line, before any job is sent, instead of failing every job.

It also opens the sweep's parent run: the jobs' runs are its children in MLflow's UI (tag
``mlflow.parentRunId``), it holds the sweep's overrides and config, and when the last job is done
it gets the comparison of the jobs (``comparison.md``: the swept values and the headline metrics
with their errors; ``pareto.png`` when the runs have a size and a quality) and ends FINISHED, or
FAILED when a job failed. The launchers wait for every job, so this holds for local sweeps and
SLURM alike. A sweep stopped before its end (Ctrl-C) leaves the parent KILLED."""

from __future__ import annotations

import atexit
import logging
import os
import re
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from modelxray.tracking.run_tags import PARENT_RUN_ENV, PARENT_STORE_ENV, SWEEP_ID_ENV, SWEPT_KEYS_ENV

log = logging.getLogger(__name__)


class SweepSetup(Callback):
    """Its keys and their defaults are in ``conf/config.yaml`` (``hydra.callbacks.sweep_setup``)."""

    def __init__(self, parent_run: bool, summary_metrics: list[str], pareto: list[str]) -> None:
        self.parent_run = parent_run
        self.summary_metrics = list(summary_metrics)
        self.pareto = list(pareto)
        self._parent = None
        self._tracker = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        os.environ[SWEEP_ID_ENV] = uuid.uuid4().hex[:12]
        os.environ[SWEPT_KEYS_ENV] = ",".join(sorted(swept_keys(config)))
        tracker_cfg = config.get("tracker")
        if tracker_cfg is None or "MlflowTracker" not in str(tracker_cfg.get("_target_", "")):
            return
        from modelxray.core.errors import ConfigError
        from modelxray.core.instantiate import build_component

        try:
            tracker = build_component(tracker_cfg, "tracker")
        except ConfigError:
            return  # each job reports the bad key itself, with the job's own overrides
        swept = {k.split(".")[0] for k in swept_keys(config)}
        if "tracker" not in swept:
            try:  # a store that cannot work stops the sweep once, before any job is sent
                tracker.check()
            except ConfigError as exc:
                print(f"modelxray: error: {exc}", file=sys.stderr)
                raise SystemExit(2) from None
        if tracker.prepare() is None:
            return
        from modelxray.tracking.sweep_runs import end_dead_runs

        ended = end_dead_runs(tracker.store_uri, tracker.experiment)
        if ended:  # a sweep killed outright left them RUNNING
            print(f"modelxray: ended {len(ended)} run(s) left RUNNING by a process that is gone (now KILLED)")
        if self.parent_run and "tracker" not in swept:
            self._open_parent(tracker, config)

    def _open_parent(self, tracker, config: DictConfig) -> None:
        from modelxray.tracking.run_tags import OVERRIDES_TAG, SWEEP_PARENT_TAG, store_key
        from modelxray.tracking.runs import SUMMARY_TAG

        overrides = [str(o) for o in config.hydra.overrides.task]
        sweep_id = os.environ[SWEEP_ID_ENV]
        tags = {
            SWEEP_PARENT_TAG: "true",
            SUMMARY_TAG: "true",  # never compared as a job itself
            "modelxray.sweep_id": sweep_id,
            "modelxray.sweep_dir": str(config.hydra.sweep.dir),
            OVERRIDES_TAG: " ".join(overrides) or "(none)",
        }
        parent = tracker.start(sweep_name(overrides, sweep_id, swept_keys(config)), tags)
        parent.log_params({"sweep/overrides": " ".join(overrides), "sweep/swept": ",".join(sorted(swept_keys(config)))})
        body = OmegaConf.to_container(config, resolve=False)
        body.pop("hydra", None)
        parent.log_text(OmegaConf.to_yaml(OmegaConf.create(body)), "sweep_config.yaml")
        parent.log_text("\n".join(overrides) + "\n", "sweep_overrides.txt")
        self._parent, self._tracker = parent, tracker
        os.environ[PARENT_RUN_ENV] = parent.run_id
        os.environ[PARENT_STORE_ENV] = store_key(tracker) or ""
        atexit.register(self._end_unfinished)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        for var in (PARENT_RUN_ENV, PARENT_STORE_ENV, SWEPT_KEYS_ENV):  # a later command is no job of this sweep
            os.environ.pop(var, None)
        parent, tracker = self._parent, self._tracker
        if parent is None:
            return
        status = "FINISHED"
        try:
            status = summarize(parent, tracker, os.environ[SWEEP_ID_ENV], config, self.summary_metrics, self.pareto)
        except Exception as exc:  # noqa: BLE001 - the jobs' runs are logged; only the summary is missing
            log.warning("The sweep's comparison could not be made: %s", exc)
        parent.finish(status)
        self._parent = None
        print(f"modelxray: sweep    parent run {parent.run_id} ({status}) holds the comparison of its jobs")
        print(f"modelxray: view     {parent.view_hint()}")

    def _end_unfinished(self) -> None:
        if self._parent is not None:
            self._parent.finish("KILLED")
            self._parent = None


def summarize(parent, tracker, sweep_id: str, config: DictConfig, metrics: list[str], pareto: list[str]) -> str:
    """Log the comparison of the sweep's runs to its parent; the parent's final status (FAILED when a
    job's run did not finish)."""
    from modelxray.core.failures import failures_so_far
    from modelxray.report.comparison import expand, plot
    from modelxray.tracking.runs import load_runs

    failed = failures_so_far()  # what the launcher and the jobs reported: also jobs that logged no run
    notes = _failed_section(failed)
    runs = load_runs(tracker.store_uri, tracker.experiment, sweep_id=sweep_id)
    if len(runs) == 0:  # every job failed, or skipped as FINISHED before (runtime.skip_finished)
        parent.log_text(f"No job of this sweep logged a new run.\n{notes}", "comparison.md")
        return "FAILED" if failed else "FINISHED"
    frame = runs.frame = with_model_size(runs.frame)
    params = [k for k in sorted(swept_keys(config)) if k in frame]
    logged = [c for c in frame.columns if "/" in c and frame[c].notna().any()]
    chosen = [m for m in expand(metrics, logged) if m in logged]
    front = list(pareto) if len(pareto) == 2 and all(k in logged for k in pareto) else None
    text = _tables_by_kind(runs, params, chosen, front)
    names = "\n".join(_run_line(parent, r, sweep_id) for r in runs)
    parent.log_text(f"# Sweep {sweep_id}: {len(runs)} runs\n\n{names}\n{notes}\n{text}\n", "comparison.md")
    parent.log_metrics({"sweep/runs": len(runs), "sweep/runs_finished": int((frame["status"] == "FINISHED").sum())})
    if front is not None and frame.dropna(subset=front).shape[0] >= 2:
        with tempfile.TemporaryDirectory() as tmp:
            path = plot(runs, *front, "run_name", (), Path(tmp) / "pareto.png")
            parent.log_files(Path(tmp), [path])
    return "FINISHED" if (frame["status"] == "FINISHED").all() and not failed else "FAILED"


def _failed_section(failed: list[str]) -> str:
    """comparison.md's list of the jobs that failed, one line each (a job stopped by bad input logged
    no run, so only this list names it)."""
    if not failed:
        return ""
    lines = "\n".join(f"- {line}" for line in failed)
    return f"\n## Failed jobs ({len(failed)})\n\n{lines}\n\nEach job's log is in its folder of the sweep.\n"


def with_model_size(frame):
    """``model/size_bytes``: the stored model's bytes, ``quant/model_bytes_after`` for a quantized run
    and the parameters' bytes (``performance/param_bytes``) for one that is not, so both kinds sit on
    one size axis."""
    sizes = [frame[k] for k in ("quant/model_bytes_after", "performance/param_bytes") if k in frame]
    if not sizes:
        return frame
    size = sizes[0]
    for other in sizes[1:]:
        size = size.fillna(other)
    return frame.assign(**{"model/size_bytes": size})


def _tables_by_kind(runs, params: list[str], metrics: list[str], front) -> str:
    """The comparison table; one per kind of model when the sweep mixed kinds (a language model's
    accuracy is per token, a classifier's per image: never ranked as one)."""
    from modelxray.report.comparison import comparison_table
    from modelxray.tracking.runs import RunCollection

    frame = runs.frame
    kinds = list(dict.fromkeys(frame["kind"].dropna())) if "kind" in frame else []
    if len(kinds) < 2:
        return comparison_table(runs, params, metrics, front)
    parts = [f"The sweep's jobs are of {len(kinds)} kinds ({', '.join(kinds)}): one table per kind."]
    for kind in kinds:
        sub = RunCollection(frame[frame["kind"] == kind].reset_index(drop=True), runs.uri, runs.experiment)
        logged = [m for m in metrics if m in sub.frame and sub.frame[m].notna().any()]
        parts += [f"\n### {kind}\n", comparison_table(sub, params, logged, front)]
    return "\n".join(parts)


def _run_line(parent, run: dict, sweep_id: str = "") -> str:
    """A job's line in comparison.md: its name linked to its page in MLflow's model-training view; a
    run an earlier sweep finished (this one skipped its config) says so."""
    link = parent.run_link(run["run_id"])
    name = f"[{run['run_name']}]({link})" if link else run["run_name"]
    earlier = ", finished by an earlier sweep" if run.get("sweep_id") not in (None, sweep_id) else ""
    return f"- `{run['run_id'][:8]}` {name} ({run['status']}{earlier})"


def sweep_name(overrides: list[str], sweep_id: str, swept: set[str] = frozenset()) -> str:
    """``sweep quant=none,int4 model=tiny_gpt2 (3f2a)``: the swept overrides first, then the others,
    cut to stay short."""
    typed = [o.lstrip("+~") for o in overrides]
    typed = [o for o in typed if not o.startswith(("tracker.", "hydra.", "progress"))]
    ordered = [o for o in typed if o.partition("=")[0] in swept] + [
        o for o in typed if o.partition("=")[0] not in swept
    ]
    text = " ".join(ordered)
    if len(text) > 56:
        text = text[:55] + "…"
    return f"sweep {text} ({sweep_id[:4]})".replace("  ", " ")


def swept_keys(config: DictConfig) -> set[str]:
    """Keys the sweep varies, as typed (``quant=int4,int8`` -> ``quant``; ``tracker.uri=a,b`` ->
    ``tracker.uri``)."""
    swept = set()
    for override in config.hydra.overrides.task:
        key, _, value = str(override).lstrip("+~").partition("=")
        outside = re.sub(r"\[[^\[\]]*\]", "[]", value)  # a list [a,b] is one value; [a],[b] are two
        if "," in outside or value.startswith(("choice(", "range(", "glob(", "interval(")):
            swept.add(key)
    return swept
