"""MLflow artifacts go next to the store (``<folder of the .db>/mlruns/<experiment>``), never into the
working directory; ``tracker.artifact_location`` wins; an existing experiment keeps its location."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import TINY_JOB, mlflow_runs, run_cli
from modelxray.tracking.mlflow_tracker import MlflowTracker


def _local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


@pytest.mark.slow  # a run.py process end to end (the in-process tests cover the numbers)
def test_artifacts_go_next_to_the_store_and_nothing_into_the_working_directory(cache_dir, tmp_path):
    cwd, store, out = tmp_path / "A", tmp_path / "B", tmp_path / "out"
    cwd.mkdir(), store.mkdir()
    uri = f"sqlite:///{store / 'mlflow.db'}"
    proc = run_cli(
        [*TINY_JOB, "tracker=mlflow", f"tracker.uri={uri}", "tracker.experiment=far", "threads=1"]
        + [f"dataset.cache_dir={cache_dir}", f"hydra.run.dir={out}"],
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list(cwd.iterdir()) == []  # no ./mlruns, no ./mlflow.db, nothing
    client, (run,) = mlflow_runs(uri, "far")
    root = _local(run.info.artifact_uri)
    assert root == store / "mlruns" / "far" / run.info.run_id / "artifacts"
    assert (root / "summary_report.md").is_file()
    # plain key=value overrides reach Hydra as ++key=value (see config.overrides.forced_overrides); tags show them as typed
    assert "++" not in run.data.tags["modelxray.overrides"] and "threads=1" in run.data.tags["modelxray.overrides"]


def test_the_location_is_set_when_the_experiment_is_created_from_any_working_directory(tmp_path, monkeypatch):
    store, elsewhere = tmp_path / "B", tmp_path / "A"
    store.mkdir(), elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    run = MlflowTracker(uri=f"sqlite:///{store / 'm.db'}", experiment="a b/c").start("r", {})
    run.log_text("hello", "note.txt")
    run.finish("FINISHED")
    exp = run.client.get_experiment_by_name("a b/c")
    assert _local(exp.artifact_location) == store / "mlruns" / "a_b_c"
    assert (store / "mlruns" / "a_b_c" / run.run_id / "artifacts" / "note.txt").read_text() == "hello"
    assert list(elsewhere.iterdir()) == []


def test_a_user_set_artifact_location_wins(tmp_path):
    chosen = tmp_path / "artifacts_here"
    tracker = MlflowTracker(uri=f"sqlite:///{tmp_path / 'm.db'}", experiment="mine", artifact_location=str(chosen))
    run = tracker.start("r", {})
    assert _local(run.client.get_experiment_by_name("mine").artifact_location) == chosen
    assert _local(run.client.get_run(run.run_id).info.artifact_uri).parent.parent == chosen


def test_an_existing_experiment_keeps_its_artifact_location(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    old = tmp_path / "old_place"
    MlflowClient(tracking_uri=uri).create_experiment("kept", artifact_location=str(old))
    run = MlflowTracker(uri=uri, experiment="kept").start("r", {})
    assert _local(run.client.get_run(run.run_id).info.artifact_uri).parent.parent == old


@pytest.mark.slow  # a sweep of subprocess jobs: `pytest -m slow`
def test_local_jobs_sweep_puts_every_jobs_artifacts_next_to_the_store(cache_dir, tmp_path):
    cwd, store = tmp_path / "A", tmp_path / "B"
    cwd.mkdir(), store.mkdir()
    uri = f"sqlite:///{store / 'mlflow.db'}"
    proc = run_cli(
        ["-m", "hydra/launcher=local_jobs", *TINY_JOB, "tracker=mlflow", f"tracker.uri={uri}", "seed=0,1"]
        + ["tracker.experiment=sweep", f"dataset.cache_dir={cache_dir}", f"hydra.sweep.dir={tmp_path}/multirun"],
        cwd=cwd,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, runs = mlflow_runs(uri, "sweep")
    assert len(runs) == 2
    for run in runs:
        assert (_local(run.info.artifact_uri) / "summary_report.md").is_file()
        assert _local(run.info.artifact_uri).is_relative_to(store / "mlruns" / "sweep")
    assert list(cwd.iterdir()) == []
