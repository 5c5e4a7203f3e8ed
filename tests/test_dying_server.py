"""A tracking server that dies mid-run costs nothing: the analysis goes on, every call to the dead
server is bounded (seconds), the report is written, the run folder says it is not synced, and one
command sends it to a server later."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request

import pytest
from mlflow.tracking import MlflowClient

import modelxray
from conftest import REPO


def _server(folder):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        ["bash", str(REPO / "scripts" / "mlflow_server.sh")],
        cwd=folder,
        start_new_session=True,
        env={**os.environ, "MLFLOW_DIR": str(folder), "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=open(folder / f"server{port}.log", "w"),
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"{uri}/health", timeout=2).read().strip() == b"OK":
                return uri, proc
        except OSError:
            time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.skip("the MLflow server did not come up in 120 s")


def test_a_server_dying_mid_run_leaves_a_whole_local_run_that_syncs_later(tmp_path, cache_dir, monkeypatch):
    store = tmp_path / "server"
    store.mkdir()
    uri, proc = _server(store)
    monkeypatch.setenv("MODELXRAY_TEST_KILL_PGID", str(proc.pid))
    monkeypatch.setenv("MODELXRAY_TEST_KILL_URI", uri)
    monkeypatch.setenv("MODELXRAY_TEST_COUNT", str(tmp_path / "count.txt"))
    overrides = [
        "debug=tiny",
        f"dataset.cache_dir={cache_dir}",
        "analyzer.performance.iters=1",
        "analyzer.performance.layer_timing_iters=1",
        "+analyzer.kill._target_=failing_analyzer.ServerKillingAnalyzer",
        "+analyzer.count._target_=failing_analyzer.CountingAnalyzer",
        "tracker=mlflow_server",
        f"tracker.uri={uri}",
        "tracker.request_timeout_s=2",
        "tracker.request_retries=0",
    ]
    run_dir = tmp_path / "run"
    start = time.perf_counter()
    out = modelxray.analyze(overrides, output_dir=run_dir)
    seconds = time.perf_counter() - start
    proc.wait(timeout=30)
    assert not out.failed and (tmp_path / "count.txt").read_text() == "ran\n"  # the analyzer after the kill ran
    assert "NOT SYNCED" in out.tracking and seconds < 60, (out.tracking, seconds)
    assert (run_dir / "summary_report.md").is_file() and (run_dir / "results" / "count.json").is_file()
    unsynced = json.loads((run_dir / "tracking_unsynced.json").read_text())
    assert unsynced["run_id"] == out.run_id

    uri2, proc2 = _server(store)  # the server back, on the same store
    try:
        sync = subprocess.run(
            ["python", str(REPO / "scripts" / "sync_run.py"), str(run_dir), "--uri", uri2],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert sync.returncode == 0, sync.stderr
        run = MlflowClient(tracking_uri=uri2).get_run(out.run_id)  # the run it began, continued
        assert run.info.status == "FINISHED" and run.data.metrics["count/runs"] == 1.0
        assert "performance/perplexity" in run.data.metrics
        assert not (run_dir / "tracking_unsynced.json").exists()
    finally:
        os.killpg(proc2.pid, signal.SIGTERM)
        proc2.wait(timeout=30)
