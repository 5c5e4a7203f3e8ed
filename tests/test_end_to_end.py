"""Whole runs on the tiny model: reports, MLflow runs, failures, sweeps, the Python API."""

import json
import math

import pytest
import torch

import modelxray
from conftest import mlflow_runs, run_cli
from modelxray import app


def untracked(overrides):
    return [o for o in overrides if not o.startswith("tracker.")] + ["tracker=none"]


REPORT_FILES = [
    "analysis_results.json",
    "summary_report.md",
    "insights.md",
    "plots/performance_speed.png",
    "plots/performance_memory.png",
    "plots/analysis_summary_dashboard.png",
]


def test_tiny_model_end_to_end_writes_reports_and_mlflow_run(tiny, tracking_uri, tmp_path, request):
    out = modelxray.analyze(tiny, output_dir=tmp_path / "run")
    for f in REPORT_FILES:
        assert (tmp_path / "run" / f).is_file(), f
    results = json.loads((tmp_path / "run" / "analysis_results.json").read_text())
    assert results["results"]["performance"]["ok"]
    client, runs = mlflow_runs(tracking_uri, request.node.name)
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED" and run.info.run_id == out.run_id
    m = run.data.metrics
    for key in [
        "performance/perplexity",
        "performance/loss",
        "performance/accuracy",
        "performance/top5_accuracy",
        "performance/bits_per_byte",
        "performance/bs1_latency_p95_ms",
        "performance/bs4_tokens_per_s",
        "performance/param_bytes",
        "performance/peak_rss_bytes",
        "performance/layer_time_total_ms",
    ]:
        assert key in m and math.isfinite(m[key]), key
    assert m["performance/perplexity"] == pytest.approx(math.exp(m["performance/loss"]))
    p = run.data.params
    assert p["model"] == "tiny_gpt2" and p["quant"] == "none" and p["dataset"] == "pydoc_topics"
    assert p["dataset.max_tokens"] == "1024" and p["model/source_format"] == "config"
    assert p["analyzer.performance.protocol"] == "disjoint"
    tags = run.data.tags
    assert "host" in tags and "version.torch" in tags and "modelxray.overrides" in tags
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"summary_report.md", "insights.md", "analysis_results.json", "plots"} <= artifacts
    plots = {a.path for a in client.list_artifacts(run.info.run_id, "plots")}
    assert "plots/analysis_summary_dashboard.png" in plots
    summary = (tmp_path / "run" / "summary_report.md").read_text()
    assert "perplexity" in summary and "tiny-gpt2" in summary


def test_failing_analyzer_marks_run_failed_and_keeps_other_results(tiny, tracking_uri, tmp_path, request):
    overrides = tiny + ["+analyzer.boom._target_=failing_analyzer.BoomAnalyzer"]
    out = modelxray.analyze(overrides, output_dir=tmp_path / "run")
    assert out.failed == ["boom"]
    assert "performance/perplexity" in out.metrics
    tb = (tmp_path / "run" / "errors" / "boom_traceback.txt").read_text()
    assert "RuntimeError: boom on purpose" in tb
    client, runs = mlflow_runs(tracking_uri, request.node.name)
    run = runs[0]
    assert run.info.status == "FAILED"
    assert "performance/perplexity" in run.data.metrics
    errs = {a.path for a in client.list_artifacts(run.info.run_id, "errors")}
    assert "errors/boom_traceback.txt" in errs
    assert "boom" in (tmp_path / "run" / "insights.md").read_text()


def test_exception_outside_analyzers_marks_run_failed(tiny, tracking_uri, tmp_path, request, monkeypatch):
    def broken(*a, **k):
        raise OSError("disk on fire")

    monkeypatch.setattr(app.process_cache, "lookup", broken)
    with pytest.raises(OSError):
        modelxray.analyze(tiny, output_dir=tmp_path / "run")
    client, runs = mlflow_runs(tracking_uri, request.node.name)
    assert runs[0].info.status == "FAILED"
    assert "disk on fire" in (tmp_path / "run" / "errors" / "run_traceback.txt").read_text()


@pytest.mark.slow  # a run.py process end to end (the CI runs the slow suite too)
def test_two_job_multirun_makes_two_mlflow_runs_and_loads_model_once(tmp_path):
    db = f"sqlite:///{tmp_path}/mlflow.db"
    proc = run_cli(
        [
            "-m",
            "model=tiny_gpt2",
            "dataset.max_tokens=2048,4096",
            f"tracker.uri={db}",
            "analyzer.performance.iters=1",
            "analyzer.performance.layer_timing=false",
            "progress=false",
            f"dataset.cache_dir={tmp_path}/cache",
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = sorted(tmp_path.glob("multirun/*/*/[0-9]"))
    assert len(jobs) == 2
    for job in jobs:
        assert (job / "summary_report.md").is_file()
        saved = (job / ".hydra" / "overrides.yaml").read_text()  # as typed, runnable as it stands
        assert "- model=tiny_gpt2" in saved and "- dataset.max_tokens=" in saved and "++" not in saved
    client, runs = mlflow_runs(db, "modelxray")
    assert len(runs) == 2
    assert sorted(r.data.params["dataset.max_tokens"] for r in runs) == ["2048", "4096"]
    assert sorted(r.data.tags["modelxray.model_cache"] for r in runs) == ["hit", "miss"]
    assert {r.data.tags["modelxray.job_num"] for r in runs} == {"0", "1"}
    assert all(r.info.status == "FINISHED" for r in runs)


def test_api_with_in_memory_model_and_tokenizer(tiny, tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    from modelxray.models.byte_tokenizer import ByteTokenizer

    torch.manual_seed(1)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=257, n_positions=256, n_embd=32, n_layer=1, n_head=2))
    out = modelxray.analyze(untracked(tiny), model=model, tokenizer=ByteTokenizer(), output_dir=tmp_path)
    assert out.run_id is None and math.isfinite(out.metrics["performance/perplexity"])
    assert json.loads((tmp_path / "analysis_results.json").read_text())["run"]["model"]["source_format"] == "in-memory"


def test_api_with_dataloader_matches_plain_loop(tiny, tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.Linear(16, 50))
    data = torch.randint(0, 50, (6, 32))
    loader = torch.utils.data.DataLoader(data, batch_size=3)
    out = modelxray.analyze(
        untracked(tiny) + ["analyzer.performance.layer_timing=false"],
        model=model,
        dataloader=loader,
        output_dir=tmp_path,
    )
    with torch.no_grad():
        logits = model(data)
    ref = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 50), data[:, 1:].reshape(-1))
    assert out.metrics["performance/loss"] == pytest.approx(float(ref), rel=1e-5)


def test_in_memory_model_without_tokenizer_or_data_is_a_clear_error(tiny):
    with pytest.raises(modelxray.ConfigError, match="tokenizer: an in-memory model needs"):
        modelxray.analyze(tiny, model=torch.nn.Linear(2, 2))


def test_threads_hold_for_the_run_only(cache_dir, tmp_path):
    """``threads=1`` must not leave a Python caller's torch on one thread (its later work, and
    anything seeded that depends on the thread count, would change)."""
    before = torch.get_num_threads()
    quick = ["analyzer=[inspect]", "analyzer.inspect.compute=false"]  # weights only: the run is seconds
    modelxray.analyze(["debug=tiny", f"dataset.cache_dir={cache_dir}", *quick, "threads=1"], output_dir=tmp_path / "r")
    assert torch.get_num_threads() == before
