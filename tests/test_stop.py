"""A stopped process (SIGTERM: scancel, a time limit, a shutdown) ends in seconds with one line and exit
143; its run ends KILLED with what finished kept, and a stopped sweep stops its jobs and ends its
parent run KILLED."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, mlflow_runs

HANG = ["+analyzer.hang._target_=failing_analyzer.HangingAnalyzer"]
QUICK = [
    "debug=tiny",
    "analyzer=[performance]",
    "analyzer.performance.iters=1",
    "analyzer.performance.layer_timing=false",
    "analyzer.performance.speed_batch_sizes=[1]",
    "report.dashboard=false",
    "tracker=mlflow",
]


def _start(args: list[str], cwd: Path, flag: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO / "tests")]),
        "MODELXRAY_TEST_HANG": str(flag),
        "HYDRA_FULL_ERROR": "0",
    }
    cmd = [sys.executable, str(REPO / "run.py"), "threads=1", *args]
    # its own session, as a terminal gives a command: Ctrl-C reaches the whole group; and Ctrl-C
    # heard as a terminal's command hears it, even where this suite runs in a background shell job
    # (which starts its commands with SIGINT ignored)
    return subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _wait_for(flags, proc: subprocess.Popen) -> None:
    deadline = time.time() + 240
    while not all(f.exists() for f in flags) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert all(f.exists() for f in flags), f"the hanging analyzer never started (exit {proc.poll()})"


def _stop(proc: subprocess.Popen, how: str = "SIGTERM") -> tuple[str, str]:
    """SIGTERM to the process (scancel, a time limit), or Ctrl-C: SIGINT to its whole process group, as
    the terminal sends it. A stop that hangs fails at the timeout."""
    if how == "SIGTERM":
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=90)
    return stderr, stdout


def test_sigterm_ends_the_run_killed_in_one_line(tmp_path, cache_dir):
    db = f"sqlite:///{tmp_path}/m.db"
    flag = tmp_path / "hanging"
    args = [*QUICK, f"dataset.cache_dir={cache_dir}", f"tracker.uri={db}", "hydra.run.dir=out", *HANG]
    proc = _start(args, tmp_path, flag)
    _wait_for([flag], proc)
    stderr, _ = _stop(proc)
    assert proc.returncode == 143 and "Traceback" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == (
        "modelxray: stopped by SIGTERM: what finished is kept; runtime.skip_finished=true resumes the rest"
    )
    _, (run,) = mlflow_runs(db, "modelxray")
    assert run.info.status == "KILLED" and "performance/perplexity" in run.data.metrics


@pytest.mark.parametrize("how", [pytest.param("SIGTERM", marks=pytest.mark.slow), "Ctrl-C"])
def test_a_stopped_sweep_stops_its_jobs_and_ends_its_parent_killed(how, tmp_path, cache_dir):
    """Jobs in their own processes (hydra/launcher=local_jobs), as on SLURM: the sweep's process is
    stopped while both jobs are analysing, by SIGTERM or by Ctrl-C in its terminal (which reaches the
    sweep alone: it stops its jobs itself, and nothing prints a traceback)."""
    db = f"sqlite:///{tmp_path}/m.db"
    flag = tmp_path / "hanging"
    args = ["-m", "hydra/launcher=local_jobs", *QUICK, f"dataset.cache_dir={cache_dir}", f"tracker.uri={db}"]
    args += ["quant=none,int8", "hydra.sweep.dir=sweep", *HANG]
    proc = _start(args, tmp_path, flag)
    _wait_for([flag], proc)
    deadline = time.time() + 120  # both jobs analysing: their runs are in the store
    while time.time() < deadline:
        try:
            _, runs = mlflow_runs(db, "modelxray")
        except AssertionError:
            runs = []
        if len(runs) == 2 and all("performance/perplexity" in r.data.metrics for r in runs):
            break
        time.sleep(0.5)
    stderr, stdout = _stop(proc, how)
    assert proc.returncode == (143 if how == "SIGTERM" else 130), stderr[-3000:]
    assert "Traceback" not in stderr + stdout and "KeyboardInterrupt" not in stderr + stdout, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith(f"modelxray: stopped by {how}")
    _, runs = mlflow_runs(db, "modelxray", parents=True)
    status = {r.data.tags.get("modelxray.sweep_parent") == "true": set() for r in runs}
    for r in runs:
        status[r.data.tags.get("modelxray.sweep_parent") == "true"].add(r.info.status)
    assert status == {True: {"KILLED"}, False: {"KILLED"}}, [(r.info.run_name, r.info.status) for r in runs]
    left = subprocess.run(["pgrep", "-f", f"{tmp_path}/sweep/.submitit"], capture_output=True, text=True).stdout
    assert not left.strip(), f"jobs still running: {left}"


def test_a_full_disk_fails_the_run_in_one_line_and_leaves_no_cut_file(tmp_path, cache_dir):
    """A file-size limit (as a full disk or a quota would) while the plots are written: exit 1, one line
    naming the file, the results already written kept, no truncated PNG or partial file left."""
    import resource

    from PIL import Image

    limit = 60 * 1024  # the results files fit; the larger plots do not

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    args = ["debug=tiny", "analyzer=[performance,robustness]", "analyzer.performance.iters=1"]
    args += ["runtime.original_weights=memory", f"dataset.cache_dir={cache_dir}", "hydra.run.dir=out"]
    proc = subprocess.run(
        [sys.executable, str(REPO / "run.py"), "threads=1", *args],
        cwd=tmp_path,
        env={**os.environ, "HYDRA_FULL_ERROR": "0"},
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=small_files,
    )
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert last.startswith(f"modelxray: error: cannot write {tmp_path}/out/") and last.endswith(": File too large")
    out = tmp_path / "out"
    assert (out / "results" / "performance.json").exists()
    assert not [p for p in out.rglob("*") if ".partial" in p.name]
    for png in out.rglob("*.png"):
        with Image.open(png) as im:
            im.load()  # whole: a cut file raises here
