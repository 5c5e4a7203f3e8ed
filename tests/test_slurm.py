"""Against real infrastructure on this machine: a single-node SLURM cluster (Debian's slurmctld,
slurmd, munge, started by scripts/slurm_start.sh) and an MLflow tracking server on loopback
(scripts/mlflow_server.sh). Skipped, saying why, where SLURM cannot be started (not root, no apt,
the install or a daemon failed); MODELXRAY_REQUIRE_SLURM=1 turns that skip into a failure."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import REPO, TINY_JOB, mlflow_runs, run_cli

pytestmark = pytest.mark.slow  # long end-to-end runs: `pytest -m slow`

SLURM_DIR = "/tmp/modelxray_slurm"
TINY = TINY_JOB


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """A real tracking server (SQLite store, served artifacts) on a free loopback port."""
    port, folder = _free_port(), tmp_path_factory.mktemp("server")
    proc = subprocess.Popen(
        ["bash", str(REPO / "scripts" / "mlflow_server.sh")],
        cwd=folder,
        start_new_session=True,
        env={**os.environ, "MLFLOW_DIR": str(folder), "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=open(folder / "server.log", "w"),
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"{uri}/health", timeout=2).read().strip() == b"OK":
                break
        except OSError:
            time.sleep(1)
        if proc.poll() is not None:
            pytest.fail(f"the MLflow server exited: {(folder / 'server.log').read_text()[-2000:]}")
    else:
        os.killpg(proc.pid, signal.SIGTERM)
        pytest.fail(f"the MLflow server did not come up in 180 s: {(folder / 'server.log').read_text()[-2000:]}")
    yield uri
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=60)


def _cannot_start(reason: str) -> None:
    """Skip, saying why; fail instead where SLURM is required (MODELXRAY_REQUIRE_SLURM=1, e.g. on CI)."""
    if os.environ.get("MODELXRAY_REQUIRE_SLURM") == "1":
        pytest.fail(f"MODELXRAY_REQUIRE_SLURM=1 but {reason}")
    pytest.skip(reason)


def _why(stderr: str) -> str:
    """The script's own ERROR line (it then prints log tails), else its last line."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if "ERROR:" in line]
    return (errors or lines or ["no message"])[-1]


@pytest.fixture(scope="module")
def slurm():
    """A running single-node cluster, and the PATH with submitit's sacct stand-in first."""
    if os.geteuid() != 0:
        _cannot_start("SLURM cannot be started here: scripts/slurm_start.sh needs root (apt install, daemons)")
    if shutil.which("sinfo") is None and shutil.which("apt-get") is None:
        _cannot_start("SLURM cannot be started here: no slurm packages and no apt-get to install them")
    env = {**os.environ, "SLURM_LOCAL_DIR": SLURM_DIR, "SLURM_LOCAL_CPUS": "4"}
    start = subprocess.run(
        ["bash", str(REPO / "scripts" / "slurm_start.sh")], env=env, capture_output=True, text=True, timeout=900
    )
    if start.returncode != 0:
        _cannot_start(
            f"SLURM could not be started (scripts/slurm_start.sh exit {start.returncode}): {_why(start.stderr)}"
        )
    yield {"PATH": f"{SLURM_DIR}/bin:{os.environ['PATH']}"}
    subprocess.run(["bash", str(REPO / "scripts" / "slurm_stop.sh")], env=env, capture_output=True, timeout=300)


def test_slurm_sweep_logs_every_job_to_the_tracking_server(slurm, mlflow_server, cache_dir, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "run.py"),
            "-m",
            "hydra/launcher=slurm",
            "quant=none,int8",
            *TINY,
            f"dataset.cache_dir={cache_dir}",
            "tracker=mlflow_server",
            f"tracker.uri={mlflow_server}",
            "tracker.experiment=slurm_sweep",
            "hydra.launcher.cpus_per_task=1",
            "hydra.launcher.mem_gb=2",
            "hydra.launcher.timeout_min=10",
            f"hydra.sweep.dir={tmp_path}/multirun",
        ],
        cwd=tmp_path,
        env={**os.environ, **slurm},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    client, runs = mlflow_runs(mlflow_server, "slurm_sweep")
    assert len(runs) == 2 and all(r.info.status == "FINISHED" for r in runs)
    assert {r.data.params["quant"] for r in runs} == {"none", "int8"}
    for r in runs:
        assert "performance/perplexity" in r.data.metrics
        assert r.data.tags["modelxray.executor"] == "slurm" and r.data.tags["modelxray.slurm_job_id"]
        artifacts = {a.path for a in client.list_artifacts(r.info.run_id)}
        assert {"summary_report.md", "analysis_results.json"} <= artifacts
    assert len({r.data.tags["modelxray.sweep_id"] for r in runs}) == 1


def test_eight_parallel_jobs_to_one_tracking_server(mlflow_server, cache_dir, tmp_path):
    proc = run_cli(
        [
            "-m",
            "hydra/launcher=local_jobs",
            "seed=0,1,2,3,4,5,6,7",
            *TINY,
            f"dataset.cache_dir={cache_dir}",
            "tracker=mlflow_server",
            f"tracker.uri={mlflow_server}",
            "tracker.experiment=server_parallel",
            f"hydra.sweep.dir={tmp_path}/multirun",
        ],
        cwd=tmp_path,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, runs = mlflow_runs(mlflow_server, "server_parallel")
    assert len(runs) == 8 and all(r.info.status == "FINISHED" for r in runs)
    assert sorted(r.data.params["seed"] for r in runs) == [str(i) for i in range(8)]
    names = {frozenset(r.data.metrics) for r in runs}
    assert len(names) == 1 and "performance/perplexity" in next(iter(names))
