"""Results survive a crash: each analyzer is saved (run directory and MLflow) when it finishes, and a
resumed run (``runtime.skip_finished``, ``runtime.resume``) does not compute it again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import modelxray
from conftest import REPO, mlflow_runs
from modelxray.core.errors import ConfigError
from modelxray.report.result_file import load_result, save_result

EXTRA = [
    "+analyzer.count._target_=failing_analyzer.CountingAnalyzer",
    "+analyzer.hang._target_=failing_analyzer.HangingAnalyzer",
]


def test_a_result_file_round_trips_measurements_texts_files_and_nan():
    from modelxray.core.result import Result
    from modelxray.metrics.measurements import Latency, Quality

    r = Result("performance", metrics={"x": 1.5, "y": float("nan")}, tables={"t": [{"a": float("inf"), "b": "s"}]})
    r.record("latency", Latency.from_values([0.010, 0.012, 0.011]))
    r.record("quality", Quality.from_dict({"loss": 2.0, "tokens_scored": 100, "loss_se": 0.1}))
    r.texts["report.txt"] = "hello"
    r.files["raw/blob.bin"] = b"\x00\x01"
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        back = load_result(save_result(Path(d), "performance", r), source="src")
    assert back.metrics["x"] == 1.5 and back.metrics["y"] != back.metrics["y"]
    assert back.tables["t"][0]["a"] == float("inf") and back.texts == r.texts and back.files == r.files
    assert back.source == "src"
    for name in ("latency", "quality"):
        assert type(back.measurements[name]) is type(r.measurements[name])
        assert back.measurements[name].to_metrics() == pytest.approx(r.measurements[name].to_metrics())


def test_interrupted_run_keeps_the_finished_analyzers_and_a_rerun_resumes_it(
    tiny, tracking_uri, tmp_path, request, monkeypatch
):
    count = tmp_path / "count.txt"
    monkeypatch.setenv("MODELXRAY_TEST_COUNT", str(count))
    monkeypatch.setenv("MODELXRAY_TEST_INTERRUPT", "1")
    overrides = tiny + EXTRA
    with pytest.raises(KeyboardInterrupt):
        modelxray.analyze(overrides, output_dir=tmp_path / "first")
    client, (run,) = mlflow_runs(tracking_uri, request.node.name)
    assert run.info.status == "KILLED"
    # the two analyzers that finished are in MLflow and on disk, though the run never ended normally
    assert {"performance/perplexity", "count/runs"} <= set(run.data.metrics)
    assert run.data.tags["modelxray.analyzers_done"] == "performance,count"
    assert (tmp_path / "first" / "results" / "performance.json").exists()
    assert any(a.path == "results/performance.json" for a in client.list_artifacts(run.info.run_id, "results"))
    ppl = run.data.metrics["performance/perplexity"]

    monkeypatch.delenv("MODELXRAY_TEST_INTERRUPT")
    out = modelxray.analyze(overrides + ["runtime.skip_finished=true"], output_dir=tmp_path / "second")
    assert out.run_id == run.info.run_id and not out.failed
    assert count.read_text() == "ran\n"  # the counting analyzer did not run again
    assert out.metrics["performance/perplexity"] == pytest.approx(ppl)
    assert out.metrics["hang/answer"] == 42
    client, (again,) = mlflow_runs(tracking_uri, request.node.name)  # the same run, continued
    assert again.info.status == "FINISHED"
    assert again.data.tags["modelxray.resumed_analyzers"] == "performance,count"
    assert again.data.tags["modelxray.analyzers_done"] == "performance,count,hang"
    # the report of the resumed run is whole: the earlier analyzers' plots and numbers are in it
    summary = (tmp_path / "second" / "summary_report.md").read_text()
    assert "perplexity" in summary and (tmp_path / "second" / "plots" / "performance_speed.png").exists()
    results = json.loads((tmp_path / "second" / "analysis_results.json").read_text())["results"]
    assert set(results) == {"performance", "count", "hang"}
    # the earlier results came back into results/, with no copy beside the report (nor in the store)
    assert not {"performance.json", "count.json"} & {p.name for p in (tmp_path / "second").glob("*.json")}
    top = {a.path for a in client.list_artifacts(run.info.run_id) if a.path.endswith(".json")}
    assert not {"performance.json", "count.json"} & top

    # a third run is FINISHED already: skipped
    assert modelxray.analyze(overrides + ["runtime.skip_finished=true"], output_dir=tmp_path / "third").skipped


def test_a_stored_result_naming_a_file_outside_the_run_folder_stops_the_resume(
    tiny, tracking_uri, tmp_path, request, monkeypatch
):
    """A tampered result file in a shared store must not make a resumed run write anywhere: the
    run stops, in one line naming the entry, before the model loads and before any file is written."""
    for entry in ("../../escaped.txt", "ABSOLUTE"):
        _tampered_resume_stops(entry, tiny, tracking_uri, tmp_path / entry.strip("./"), request, monkeypatch)


def _tampered_resume_stops(entry, tiny, tracking_uri, tmp_path, request, monkeypatch):
    from pathlib import Path
    from urllib.parse import unquote, urlparse

    monkeypatch.setenv("MODELXRAY_TEST_COUNT", str(tmp_path / "count.txt"))
    monkeypatch.setenv("MODELXRAY_TEST_INTERRUPT", "1")
    overrides = tiny + EXTRA
    with pytest.raises(KeyboardInterrupt):
        modelxray.analyze(overrides, output_dir=tmp_path / "first")
    _, runs = mlflow_runs(tracking_uri, request.node.name)
    run = max(runs, key=lambda r: r.info.start_time)  # the one just interrupted
    stored = Path(unquote(urlparse(run.info.artifact_uri).path)) / "results" / "count.json"
    target = tmp_path / "outside" / "written.txt"
    name = str(target) if entry == "ABSOLUTE" else entry
    payload = json.loads(stored.read_text())
    payload["texts"][name] = "written by a tampered result"
    stored.write_text(json.dumps(payload))
    monkeypatch.delenv("MODELXRAY_TEST_INTERRUPT")
    second = tmp_path / "second" / "run"
    with pytest.raises(
        ConfigError, match=r"^runtime.resume: .*count.json names the file .*outside the run folder"
    ) as e:
        modelxray.analyze(overrides + [f"runtime.resume={run.info.run_id}"], output_dir=second)
    assert name in str(e.value) and "\n" not in str(e.value)
    assert (
        not target.exists()
        and not (tmp_path / "second" / "escaped.txt").exists()
        and not (tmp_path / "escaped.txt").exists()
    )


def test_resume_names_a_run_of_the_same_config(tiny, tracking_uri, tmp_path, request):
    out = modelxray.analyze(tiny, output_dir=tmp_path / "a")
    with pytest.raises(ConfigError, match=r"runtime.resume: run .* another configuration"):
        modelxray.analyze(tiny + ["dataset.max_tokens=512", f"runtime.resume={out.run_id}"], output_dir=tmp_path / "b")
    with pytest.raises(ConfigError, match=r"runtime.resume: no run 'nope'"):
        modelxray.analyze(tiny + ["runtime.resume=nope"], output_dir=tmp_path / "c")


@pytest.mark.slow
def test_sigkill_in_the_second_analyzer_loses_nothing_of_the_first(tmp_path, cache_dir):
    """A real kill: the process dies in SIGKILL during an analyzer; the analyzers before it are in
    MLflow and on disk, and a ``runtime.skip_finished`` re-run finishes the run without redoing them."""
    db = f"sqlite:///{tmp_path}/mlflow.db"
    args = [
        "debug=tiny",
        f"dataset.cache_dir={cache_dir}",
        "analyzer.performance.iters=1",
        "analyzer.performance.layer_timing_iters=1",
        "tracker=mlflow",
        f"tracker.uri={db}",
        "hydra.run.dir=out/${runtime.skip_finished}",
        *EXTRA,
    ]
    flag, count = tmp_path / "hanging", tmp_path / "count.txt"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO / "tests")]),
        "MODELXRAY_TEST_COUNT": str(count),
        "MODELXRAY_TEST_HANG": str(flag),
    }
    proc = subprocess.Popen([sys.executable, str(REPO / "run.py"), *args], cwd=tmp_path, env=env)
    deadline = time.time() + 240
    while not flag.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert flag.exists(), f"the hanging analyzer never started (exit {proc.poll()})"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    client, (run,) = mlflow_runs(db, "modelxray")
    assert run.info.status == "RUNNING"  # nothing could end it
    assert {"performance/perplexity", "count/runs"} <= set(run.data.metrics)
    saved = load_result(tmp_path / "out" / "False" / "results" / "performance.json")
    assert saved.metrics["perplexity"] == pytest.approx(run.data.metrics["performance/perplexity"])

    del env["MODELXRAY_TEST_HANG"]
    done = subprocess.run(
        [sys.executable, str(REPO / "run.py"), *args, "runtime.skip_finished=true"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert count.read_text() == "ran\n"
    client, (run,) = mlflow_runs(db, "modelxray")
    assert run.info.status == "FINISHED" and run.data.metrics["hang/answer"] == 42
    assert (tmp_path / "out" / "True" / "plots" / "performance_speed.png").exists()
