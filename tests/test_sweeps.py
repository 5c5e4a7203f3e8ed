"""Sweeps at scale: launcher configs compose, the tracking store and experiment are prepared once
before jobs start, and parallel jobs on one SQLite file lose no run."""
from __future__ import annotations

import pytest
from conftest import mlflow_runs, run_cli

from modelxray.tracking.mlflow_tracker import MlflowTracker


def test_sqlite_uri_gets_a_busy_timeout_and_prepare_creates_the_experiment(tmp_path):
    db = tmp_path / "m.db"
    tracker = MlflowTracker(uri=f"sqlite:///{db}", experiment="prep")
    assert tracker.store_uri == f"sqlite:///{db}?timeout=60"
    assert MlflowTracker(uri=f"sqlite:///{db}?timeout=5").store_uri.endswith("?timeout=5")
    assert MlflowTracker(uri="http://127.0.0.1:5000").store_uri == "http://127.0.0.1:5000"
    exp_id = tracker.prepare()
    assert tracker.prepare() == exp_id and db.exists()


@pytest.mark.parametrize("launcher,target", [("slurm", "SlurmLauncher"), ("local_jobs", "LocalLauncher")])
def test_launcher_configs_compose(launcher, target, tmp_path):
    proc = run_cli([f"hydra/launcher={launcher}", "model=tiny_gpt2", "--cfg", "hydra", "--package", "hydra.launcher"],
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"submitit_launcher.{target}" in proc.stdout and "timeout_min: 60" in proc.stdout
    if launcher == "slurm":
        assert "partition: null" in proc.stdout and "gpus_per_node: null" in proc.stdout and "setup: []" in proc.stdout


def test_eight_parallel_local_jobs_on_one_sqlite_file_lose_nothing(cache_dir, tmp_path):
    """The race users hit: 8 jobs creating the schema and experiment at once on a fresh SQLite file."""
    uri = f"sqlite:///{tmp_path / 'fresh.db'}"
    proc = run_cli(["-m", "hydra/launcher=local_jobs", "seed=0,1,2,3,4,5,6,7", "model=tiny_gpt2",
                    "model.n_layer=1", "dataset.max_tokens=512", "dataset.seq_len=64", f"dataset.cache_dir={cache_dir}",
                    "analyzer.performance.iters=1", "analyzer.performance.layer_timing_iters=1",
                    "analyzer.performance.speed_batch_sizes=[1]", "report.dashboard=false", "progress=false",
                    f"tracker.uri={uri}", "tracker.experiment=parallel", f"hydra.sweep.dir={tmp_path}/multirun"],
                   cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, runs = mlflow_runs(uri, "parallel")
    assert len(runs) == 8 and all(r.info.status == "FINISHED" for r in runs)
    assert sorted(r.data.params["seed"] for r in runs) == [str(i) for i in range(8)]
    names = {frozenset(r.data.metrics) for r in runs}
    assert len(names) == 1 and "performance/perplexity" in next(iter(names))
    assert len({r.data.tags["modelxray.sweep_id"] for r in runs}) == 1
    assert {r.data.tags["modelxray.executor"] for r in runs} == {"local"}
