"""ModelAnalyzer: one model loaded once, one analyzer per call on the user's DataLoader,
each logged to the object's MLflow run as it finishes; the comprehensive report of all calls."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import mlflow_runs
from modelxray import ModelAnalyzer
from modelxray.core.errors import ConfigError

FAST = [
    "threads=1",
    "progress=false",
    "analyzer.performance.iters=1",
    "analyzer.performance.layer_timing=false",
    "analyzer.performance.speed_batch_sizes=[1]",
]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A GPT-2 state dict as model.pt with its config.json beside it, and a loader of token batches."""
    from transformers import GPT2Config, GPT2LMHeadModel

    folder = tmp_path_factory.mktemp("model")
    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=257, n_positions=64)
    model = GPT2LMHeadModel(config)
    torch.save(model.state_dict(), folder / "model.pt")
    config.save_pretrained(folder)
    ids = torch.randint(0, 257, (4, 32), generator=torch.Generator().manual_seed(1))
    return folder / "model.pt", model, torch.utils.data.DataLoader(ids, batch_size=2)


def test_calls_share_one_model_and_one_finished_mlflow_run(saved, tracking_uri, tmp_path, request):
    path, model, loader = saved
    track = ["tracker=mlflow", f"tracker.uri={tracking_uri}", f"tracker.experiment={request.node.name}"]
    analyzer = ModelAnalyzer(str(path), [*FAST, *track], output_dir=tmp_path / "out")
    perf = analyzer.analyze_performance(loader)
    # the file was built from the config.json beside it: same perplexity as the module itself
    direct = ModelAnalyzer(model, [*FAST, "tracker=none"], output_dir=tmp_path / "direct").analyze_performance(loader)
    assert perf["metrics"]["perplexity"] == pytest.approx(direct["metrics"]["perplexity"], rel=1e-6)
    assert perf["metrics"]["tokens_scored"] == 4 * 31
    speed = analyzer.performance_analyzer.benchmark_inference_speed(loader, iters=2)
    assert speed["batch_size"] == 2 and speed["seq_len"] == 32 and speed["tokens_per_second"] > 0
    assert speed["tokens_per_second"] == pytest.approx(64 / (speed["latency_mean_ms"] / 1000))
    files = analyzer.generate_comprehensive_report(tmp_path / "report")
    assert {"summary_report.md", "insights.md", "analysis_results.json", "plots/performance_speed.png"} <= set(files)
    assert json.loads((tmp_path / "report" / "analysis_results.json").read_text())["run"]["dataset"] == (
        "user-supplied batches"
    )
    client, (run,) = mlflow_runs(tracking_uri, request.node.name)
    assert run.info.status == "FINISHED" and run.data.tags["modelxray.entry"] == "ModelAnalyzer"
    assert {"performance/perplexity", "speed/tokens_per_second"} <= set(run.data.metrics)
    assert run.data.params["model.path"] == str(path)
    logged = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"summary_report.md", "results", "plots"} <= logged


def test_bad_loader_and_unconfigured_analyzer_are_one_line(saved, tmp_path):
    path, _, _ = saved
    analyzer = ModelAnalyzer(str(path), [*FAST, "tracker=none"], output_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"data_loader: yields input ids of shape \(2, 3\) and dtype torch.float32; "):
        analyzer.performance_analyzer.benchmark_inference_speed([torch.zeros(2, 3)])
    with pytest.raises(ConfigError, match="'inspect' is not configured here"):
        analyzer.analyze("inspect")


def test_an_image_classifier_on_a_loader_of_images_and_labels(digits, tmp_path):
    x, y = digits.x_test[:64].view(-1, 1, 8, 8), digits.y_test[:64]
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)).eval()
    analyzer = ModelAnalyzer(net, [*FAST, "tracker=none"], image_shape=(1, 8, 8), output_dir=tmp_path)
    perf = analyzer.analyze_performance(loader)
    with torch.no_grad():
        assert perf["metrics"]["accuracy"] == pytest.approx((net(x).argmax(1) == y).float().mean().item())
    rows = analyzer.bit_width_analyzer.test_configurations(loader, {"all8": [{"kind": "linear", "bits": 8}]})["tables"][
        "configurations"
    ]
    assert any(r["config"] == "custom_all8" for r in rows)
    with pytest.raises(ConfigError, match=r"^analyzer.bitwidth.custom.bad.rules\[0\]: matches everything"):
        analyzer.bit_width_analyzer.test_configurations(loader, {"bad": [{"bits": 8}]})


def test_a_tensor_dataset_loader_serves_every_call(saved, tmp_path):
    """``DataLoader(TensorDataset(input_ids))`` yields one-element lists: it used to fail inside
    performance with a raw TypeError."""
    _, model, loader = saved
    ids = torch.cat(list(loader))
    wrapped = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=2)
    analyzer = ModelAnalyzer(model, [*FAST, "tracker=none"], output_dir=tmp_path)
    perf = analyzer.analyze_performance(wrapped)
    plain = ModelAnalyzer(model, [*FAST, "tracker=none"], output_dir=tmp_path / "plain").analyze_performance(loader)
    assert perf["metrics"]["perplexity"] == pytest.approx(plain["metrics"]["perplexity"], rel=1e-6)
    speed = analyzer.performance_analyzer.benchmark_inference_speed(wrapped, iters=1)
    assert speed["batch_size"] == 2 and speed["seq_len"] == 32
