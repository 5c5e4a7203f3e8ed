"""Sweeps at scale: launcher configs compose, the tracking store and experiment are prepared once
before jobs start, and parallel jobs on one SQLite file lose no run."""

from __future__ import annotations

import pytest

from conftest import TINY_JOB, mlflow_runs, run_cli
from modelxray.tracking.mlflow_tracker import MlflowTracker


def test_sqlite_uri_gets_a_busy_timeout_and_prepare_creates_the_experiment(tmp_path):
    db = tmp_path / "m.db"
    tracker = MlflowTracker(uri=f"sqlite:///{db}", experiment="prep")
    assert tracker.store_uri == f"sqlite:///{db}?timeout=60"
    assert MlflowTracker(uri=f"sqlite:///{db}?timeout=5").store_uri.endswith("?timeout=5")
    assert MlflowTracker(uri="http://127.0.0.1:5000").store_uri == "http://127.0.0.1:5000"
    exp_id = tracker.prepare()
    assert tracker.prepare() == exp_id and db.exists()


TINY = [*TINY_JOB, "tracker=mlflow"]  # debug=tiny turns tracking off


@pytest.mark.parametrize("launcher,target", [("slurm", "SlurmLauncher"), ("local_jobs", "LocalLauncher")])
def test_launcher_configs_compose(launcher, target, tmp_path):
    proc = run_cli(
        [f"hydra/launcher={launcher}", "model=tiny_gpt2", "--cfg", "hydra", "--package", "hydra.launcher"], cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"modelxray_launcher.launcher.{target}" in proc.stdout and "timeout_min: 60" in proc.stdout
    if launcher == "slurm":
        assert "partition: null" in proc.stdout and "gpus_per_node: null" in proc.stdout and "setup: []" in proc.stdout


@pytest.mark.slow  # whole sweeps of subprocess jobs: `pytest -m slow`
def test_eight_parallel_local_jobs_on_one_sqlite_file_lose_nothing(cache_dir, tmp_path):
    """The race users hit: 8 jobs creating the schema and experiment at once on a fresh SQLite file."""
    uri = f"sqlite:///{tmp_path / 'fresh.db'}"
    proc = run_cli(
        [
            "-m",
            "hydra/launcher=local_jobs",
            "seed=0,1,2,3,4,5,6,7",
            *TINY,
            f"dataset.cache_dir={cache_dir}",
            f"tracker.uri={uri}",
            "tracker.experiment=parallel",
            f"hydra.sweep.dir={tmp_path}/multirun",
        ],
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, runs = mlflow_runs(uri, "parallel")
    assert len(runs) == 8 and all(r.info.status == "FINISHED" for r in runs)
    assert sorted(r.data.params["seed"] for r in runs) == [str(i) for i in range(8)]
    names = {frozenset(r.data.metrics) for r in runs}
    assert len(names) == 1 and "performance/perplexity" in next(iter(names))
    assert len({r.data.tags["modelxray.sweep_id"] for r in runs}) == 1
    assert {r.data.tags["modelxray.executor"] for r in runs} == {"local"}


@pytest.mark.slow  # whole sweeps of subprocess jobs: `pytest -m slow`
def test_a_failing_job_does_not_stop_the_others_and_is_listed_with_its_logs(cache_dir, tmp_path):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    proc = run_cli(
        [
            "-m",
            "hydra/launcher=local_jobs",
            *TINY,
            f"dataset.cache_dir={cache_dir}",
            "dataset.seq_len=64,0",
            f"tracker.uri={uri}",
            "tracker.experiment=failing",
            f"hydra.sweep.dir={tmp_path}/multirun",
        ],
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "modelxray: 1 of 2 jobs FAILED:" in proc.stderr and "job #1 (" in proc.stderr
    assert "logs: " in proc.stderr and "_log.out" in proc.stderr
    _, runs = mlflow_runs(uri, "failing")
    assert [r.info.status for r in runs] == ["FINISHED"]  # the bad config failed before a run was started
    _, every = mlflow_runs(uri, "failing", parents=True)
    (parent,) = [r for r in every if r.data.tags.get("modelxray.sweep_parent") == "true"]
    assert parent.info.status == "FAILED" and parent.data.metrics["sweep/runs_finished"] == 1


_TROUBLE = """
import os
import signal
from dataclasses import dataclass
from typing import ClassVar

from modelxray.analyzers.base import Analyzer
from modelxray.core.result import Result


@dataclass
class Killed(Analyzer):
    name: ClassVar[str] = "killed"

    def run(self, subject, ctx):
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer or SLURM would: no chance to end the run


@dataclass
class Raises(Analyzer):
    name: ClassVar[str] = "raises"

    def run(self, subject, ctx):
        raise RuntimeError("raised on purpose")


@dataclass
class Fine(Analyzer):
    name: ClassVar[str] = "fine"

    def run(self, subject, ctx):
        return Result(self.name, metrics={"ok": 1.0})
"""


@pytest.mark.slow  # whole sweeps of subprocess jobs: `pytest -m slow`
def test_killed_and_raising_jobs_end_killed_and_failed_and_are_listed(cache_dir, tmp_path):
    """A job killed outright (its run left RUNNING, then marked KILLED by the launcher) and a job whose
    analyzer raised (its run FAILED) are both listed with their logs; the third job is unaffected."""
    import os
    import subprocess
    import sys

    from conftest import REPO

    (tmp_path / "trouble.py").write_text(_TROUBLE)
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    tiny = [o for o in TINY if not o.startswith("analyzer.performance.")]
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "run.py"),
            "-m",
            "hydra/launcher=local_jobs",
            *tiny,
            f"dataset.cache_dir={cache_dir}",
            "analyzer=robustness",
            "analyzer.robustness.fgsm_eps=[]",
            "analyzer.robustness.pgd_eps=[]",
            "analyzer.robustness.weight_noise_levels=[]",
            "analyzer.robustness.quant_noise_bits=[]",
            "analyzer.robustness.dropout_rates=[]",
            "analyzer.robustness.substitution_rates=[]",
            "+analyzer.trouble._target_=trouble.Killed,trouble.Raises,trouble.Fine",
            f"tracker.uri={uri}",
            "tracker.experiment=trouble",
            f"hydra.sweep.dir={tmp_path}/multirun",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "modelxray: 2 of 3 jobs FAILED:" in proc.stderr, proc.stderr[-3000:]
    assert "job #0 (" in proc.stderr and "job #1 (" in proc.stderr and "job #2 (" not in proc.stderr
    assert "analyzer 'trouble' FAILED" in proc.stderr and "trouble_traceback.txt" in proc.stderr
    assert proc.stderr.count("logs: ") == 2
    _, runs = mlflow_runs(uri, "trouble")
    status = {r.data.params.get("analyzer.trouble._target_"): r.info.status for r in runs}
    assert status == {"trouble.Killed": "KILLED", "trouble.Raises": "FAILED", "trouble.Fine": "FINISHED"}


@pytest.mark.slow  # whole sweeps of subprocess jobs: `pytest -m slow`
def test_skip_finished_resumes_a_sweep_without_redoing_finished_jobs(cache_dir, tmp_path):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    args = [
        "-m",
        *TINY,
        f"dataset.cache_dir={cache_dir}",
        "seed=0,1",
        "runtime.skip_finished=true",
        f"tracker.uri={uri}",
        "tracker.experiment=resume",
        f"hydra.sweep.dir={tmp_path}/multirun",
    ]
    first = run_cli(args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    again = run_cli([*args[:-1], f"hydra.sweep.dir={tmp_path}/again", "seed=0,1,2"], cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("skipped: FINISHED before as run") == 2
    _, runs = mlflow_runs(uri, "resume")
    assert sorted(r.data.params["seed"] for r in runs) == ["0", "1", "2"]  # only seed 2 ran again
    assert len({r.data.tags["modelxray.config_hash"] for r in runs}) == 3
    _, every = mlflow_runs(uri, "resume", parents=True)  # skipped jobs are no failure of their sweep
    assert [r.info.status for r in every if r.data.tags.get("modelxray.sweep_parent")] == ["FINISHED"] * 2


@pytest.mark.slow  # a run.py process end to end (the CI runs the slow suite too)
def test_sigterm_ends_the_run_killed_and_orphans_are_ended(cache_dir, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import REPO

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    tiny = [o for o in TINY if not o.startswith("analyzer.performance.")]
    cmd = [
        sys.executable,
        str(REPO / "run.py"),
        *tiny,
        f"dataset.cache_dir={cache_dir}",
        "analyzer=robustness",
        "analyzer.robustness.seeds=500",  # far longer than the wait: SIGTERM lands mid-run
        f"tracker.uri={uri}",
        "tracker.experiment=killed",
    ]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not list(tmp_path.rglob("mlflow_run.json")):
        time.sleep(0.5)
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    _, runs = mlflow_runs(uri, "killed")
    assert [r.info.status for r in runs] == ["KILLED"]
    assert not any(a.path == "mlflow_run.json" for a in _artifacts(uri, runs[0].info.run_id))

    from modelxray.tracking.mlflow_run import end_orphan_run
    from modelxray.tracking.mlflow_tracker import MlflowTracker

    tracker = MlflowTracker(uri=uri, experiment="orphan")
    run = tracker.start("x", {})
    run.record(tmp_path)
    assert end_orphan_run(tmp_path) and not end_orphan_run(tmp_path)
    assert run.client.get_run(run.run_id).info.status == "KILLED"
    assert os.path.exists(tmp_path / "mlflow_run.json")


def _artifacts(uri, run_id):
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri).list_artifacts(run_id)


def test_hydra_packaged_group_choices_are_not_logged_as_params():
    from types import SimpleNamespace

    from modelxray.app import choices_of

    hc = SimpleNamespace(
        runtime=SimpleNamespace(
            choices={"quant": "int4", "hydra/launcher": "slurm", "local@hydra.launcher": "slurm", "model": None}
        )
    )
    assert choices_of(hc) == {"quant": "int4"}


def test_site_overrides_in_conf_local_reach_the_slurm_launcher(tmp_path):
    """conf/local/slurm.yaml (gitignored) overrides the launcher defaults; here it comes from a search path."""
    (tmp_path / "site" / "local").mkdir(parents=True)
    (tmp_path / "site" / "local" / "slurm.yaml").write_text(
        "partition: gpu\naccount: proj42\nsetup: ['module load cuda']\n"
    )
    proc = run_cli(
        [
            "hydra/launcher=slurm",
            "model=tiny_gpt2",
            f"hydra.searchpath=[file://{tmp_path / 'site'}]",
            "--cfg",
            "hydra",
            "--package",
            "hydra.launcher",
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "partition: gpu" in proc.stdout and "account: proj42" in proc.stdout and "module load cuda" in proc.stdout
    assert "cpus_per_task: 2" in proc.stdout  # the rest keeps the defaults


def test_a_job_with_bad_input_does_not_stop_a_basic_sweep_and_the_comparison_lists_it(cache_dir, tmp_path, monkeypatch):
    """Hydra's basic launcher runs the jobs in this process: a job stopped by bad input (one line) is
    recorded, the next job runs, and the parent's comparison.md lists the failed job by its overrides."""
    from mlflow.tracking import MlflowClient

    from modelxray.cli import main

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    argv = ["-m", *TINY, f"dataset.cache_dir={cache_dir}", "dataset.seq_len=4096,64", f"tracker.uri={uri}",
            "tracker.experiment=basic_failing", f"hydra.sweep.dir={tmp_path}/multirun"]  # fmt: skip
    assert main(argv) == 1
    _, runs = mlflow_runs(uri, "basic_failing")
    assert [(r.info.status, r.data.params["dataset.seq_len"]) for r in runs] == [("FINISHED", "64")]
    _, every = mlflow_runs(uri, "basic_failing", parents=True)
    (parent,) = [r for r in every if r.data.tags.get("modelxray.sweep_parent") == "true"]
    assert parent.info.status == "FAILED"
    text = open(MlflowClient(uri).download_artifacts(parent.info.run_id, "comparison.md", str(tmp_path))).read()
    assert "## Failed jobs (1)" in text
    assert "- job #0 (" in text and "dataset.seq_len=4096" in text and "learned positions" in text


def test_a_resumed_sweep_ends_dead_runs_killed_and_lists_the_jobs_it_skipped(cache_dir, tmp_path, monkeypatch):
    """A sweep killed outright leaves its parent and its running job RUNNING; the next sweep on the
    store ends them KILLED. The jobs it skips as FINISHED before are in its comparison, said so."""
    import subprocess
    import sys

    from mlflow.tracking import MlflowClient

    import modelxray
    from modelxray.cli import main
    from modelxray.core.provenance import host

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    common = [*TINY, f"dataset.cache_dir={cache_dir}", "runtime.skip_finished=true", f"tracker.uri={uri}",
              "tracker.experiment=resumed"]  # fmt: skip
    first = modelxray.analyze([*common, "seed=0"], output_dir=tmp_path / "first")  # FINISHED before
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("resumed")
    orphan = client.create_run(exp.experiment_id, tags={"host": host(), "modelxray.pid": dead.stdout.strip()})
    alive = client.create_run(exp.experiment_id, tags={"host": "another-host", "modelxray.pid": "1"})
    assert main(["-m", *common, "seed=0,1", f"hydra.sweep.dir={tmp_path}/again"]) == 0
    assert client.get_run(orphan.info.run_id).info.status == "KILLED"
    assert client.get_run(alive.info.run_id).info.status == "RUNNING"  # another host's: cannot be told
    _, every = mlflow_runs(uri, "resumed", parents=True)
    (parent,) = [r for r in every if r.data.tags.get("modelxray.sweep_parent") == "true"]
    text = open(client.download_artifacts(parent.info.run_id, "comparison.md", str(tmp_path))).read()
    assert "2 runs" in text and f"`{first.run_id[:8]}`" in text
    assert "(FINISHED, finished by an earlier sweep)" in text
