"""The tags every run carries: how it was made (overrides, config fingerprint, versions, commit),
where it ran (host, process, SLURM job) and which sweep it belongs to (its id and MLflow parent run,
set by ``modelxray.sweep.SweepSetup`` in the environment every job inherits)."""

from __future__ import annotations

import os

from modelxray.core.provenance import git_commit, host, versions

SWEEP_ID_ENV = "MODELXRAY_SWEEP_ID"
SWEPT_KEYS_ENV = "MODELXRAY_SWEPT_KEYS"  # the keys a sweep varies, comma-separated: they lead its jobs' names
PARENT_RUN_ENV = "MODELXRAY_PARENT_RUN_ID"  # the sweep's parent run, in the store of the sweep's tracker
PARENT_STORE_ENV = "MODELXRAY_PARENT_RUN_STORE"  # that store: a job logging elsewhere gets no parent
OVERRIDES_TAG = "modelxray.overrides"
PARENT_TAG = "mlflow.parentRunId"  # MLflow's own: the UI nests the run under its parent
SWEEP_PARENT_TAG = "modelxray.sweep_parent"  # marks a sweep's parent run (never compared as a job)


def run_tags(overrides: list[str], sweep_dir: str | None, job_num: int | None, store: str | None) -> dict[str, str]:
    """Tags of a run made by ``overrides``; ``store`` is the tracking URI it logs to."""
    tags = {
        OVERRIDES_TAG: " ".join(overrides) or "(none)",
        "host": host(),
        **{f"version.{k}": v for k, v in versions().items()},
    }
    commit = git_commit()
    if commit:
        tags.update({"git.commit": commit, "mlflow.source.git.commit": commit})
    if sweep_dir is not None:
        tags.update({"modelxray.sweep_dir": sweep_dir, "modelxray.job_num": str(job_num)})
    tags.update(scheduler_tags())
    parent = os.environ.get(PARENT_RUN_ENV)
    if parent and store is not None and os.environ.get(PARENT_STORE_ENV) == store:
        tags[PARENT_TAG] = parent
    return tags


def store_key(tracker) -> str | None:
    """Which store and experiment a tracker logs to, as one string; None for a tracker without a
    store (``tracker=none``)."""
    key = getattr(tracker, "store_key", None)
    return key() if key is not None else None


def scheduler_tags() -> dict[str, str]:
    """Which sweep and which scheduler job this run is: the sweep id set by ``SweepSetup``, the
    submitit executor, and SLURM's job and array-task ids (the last array task's SLURM_JOB_ID
    equals the array id, so both are kept)."""
    env = os.environ
    tags = {}
    for tag, var in (
        ("modelxray.sweep_id", SWEEP_ID_ENV),
        ("modelxray.executor", "SUBMITIT_EXECUTOR"),
        ("modelxray.slurm_job_id", "SLURM_JOB_ID"),
    ):
        if env.get(var):
            tags[tag] = env[var]
    if env.get("SLURM_ARRAY_JOB_ID"):
        tags["modelxray.slurm_array_task"] = f"{env['SLURM_ARRAY_JOB_ID']}_{env.get('SLURM_ARRAY_TASK_ID', '')}"
    return tags
