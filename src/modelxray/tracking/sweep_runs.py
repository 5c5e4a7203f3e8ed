"""What a sweep finds in the store from the sweeps before it.

- Runs left RUNNING by a process that is gone (a sweep killed outright: SIGKILL, out of memory, a
  machine that went down) never end by themselves; the next sweep on the store ends them KILLED
  (``end_dead_runs``). A run of another host cannot be checked and is left as it is.
- A job a resumed sweep skips because its config FINISHED before (``runtime.skip_finished``) logs no
  new run; its earlier run is tagged as reused by the new sweep (``mark_reused``), so the new sweep's
  comparison lists it beside the jobs that ran (``tracking.runs.load_runs``).
"""

from __future__ import annotations

REUSED_TAG = "modelxray.reused_in_sweeps"  # the ids of the sweeps that skipped to this FINISHED run


def end_dead_runs(uri: str, experiment: str) -> list[str]:
    """End KILLED every RUNNING run of ``experiment`` whose process is known to be gone; their ids."""
    from mlflow.tracking import MlflowClient

    from modelxray.tracking.mlflow_tracker import _process_gone

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    ended = []
    for run in client.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'", max_results=5000):
        if _process_gone(run.data.tags):
            client.set_terminated(run.info.run_id, status="KILLED")
            ended.append(run.info.run_id)
    return ended


def mark_reused(uri: str, run_id: str, sweep_id: str) -> None:
    """Tag the FINISHED run ``run_id`` as reused by the sweep ``sweep_id`` (which skipped its config)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    ids = [i for i in client.get_run(run_id).data.tags.get(REUSED_TAG, "").split(",") if i]
    if sweep_id not in ids:
        client.set_tag(run_id, REUSED_TAG, ",".join([*ids, sweep_id]))


def reused_filter(sweep_id: str) -> str:
    """The MLflow search filter of the runs the sweep ``sweep_id`` reused."""
    return f"tags.`{REUSED_TAG}` LIKE '%{sweep_id}%'"
