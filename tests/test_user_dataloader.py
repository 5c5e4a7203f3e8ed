"""Every language-model analyzer takes a user's DataLoader of token batches (seed 000's
``analyze_bit_widths(data_loader)``, ``analyze_robustness(data_loader)``), scoring its rows as windows."""

from __future__ import annotations

import pytest
import torch

import modelxray
from modelxray.core.errors import ConfigError


@pytest.fixture(scope="module")
def model_and_loader():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=257, n_positions=64))
    ids = torch.randint(0, 257, (6, 32), generator=torch.Generator().manual_seed(1))
    return model, torch.utils.data.DataLoader(ids, batch_size=2)


def test_bitwidth_robustness_and_quant_impact_score_the_loaders_rows(model_and_loader, tmp_path):
    model, loader = model_and_loader
    overrides = [
        "analyzer=[performance,robustness,bitwidth,quant_impact]",
        "tracker=none",
        "threads=1",
        "progress=false",
        "report.dashboard=false",
        "analyzer.performance.iters=1",
        "analyzer.performance.layer_timing=false",
        "analyzer.robustness.fgsm_eps=[0.03]",
        "analyzer.robustness.pgd_eps=[]",
        "analyzer.robustness.weight_noise_levels=[]",
        "analyzer.robustness.quant_noise_bits=[]",
        "analyzer.robustness.dropout_rates=[0.1]",
        "analyzer.robustness.substitution_rates=[]",
        "analyzer.bitwidth.uniform_bits=[8]",
        "analyzer.bitwidth.sensitivity=false",
        "analyzer.quant_impact.strategies=[none,int8]",
    ]
    out = modelxray.analyze(overrides, model=model, dataloader=loader, output_dir=tmp_path)
    assert not out.failed
    m = out.metrics
    # 6 rows of 32 tokens: 31 scored each, the same windows for every analyzer
    assert m["performance/tokens_scored"] == m["bitwidth/reference_tokens_scored"] == 6 * 31
    assert m["bitwidth/reference_perplexity"] == pytest.approx(m["performance/perplexity"], rel=1e-5)
    assert m["robustness/clean_perplexity"] == pytest.approx(m["performance/perplexity"], rel=1e-5)
    assert m["quant_impact/none_perplexity"] == pytest.approx(m["performance/perplexity"], rel=1e-5)


def test_no_text_and_no_loader_is_one_line(model_and_loader):
    from modelxray.core.subject import ModelInfo, Subject

    model, _ = model_and_loader
    subject = Subject(model, None, None, ModelInfo("m", "in-memory", "float32"))
    from modelxray.analyzers.robustness.config import RobustnessAnalyzer

    with pytest.raises(ConfigError, match="needs token windows: a text dataset .* or a DataLoader of token batches"):
        RobustnessAnalyzer().preflight(subject)


def _cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 64, 10)
    )


def test_a_classifier_takes_a_loader_of_images_and_labels(digits, tmp_path):
    """(images, labels) batches become the split every classifier analyzer scores: the accuracy is the
    model's on exactly those images."""
    x, y = digits.x_test[:96].view(-1, 1, 8, 8), digits.y_test[:96]
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32)
    model = _cnn().eval()
    overrides = [
        "analyzer=[performance,robustness]",
        "tracker=none",
        "threads=1",
        "progress=false",
        "report.dashboard=false",
        "analyzer.performance.iters=1",
        "analyzer.performance.layer_timing=false",
        "analyzer.robustness.fgsm_eps=[0.1]",
        "analyzer.robustness.pgd_eps=[]",
        "analyzer.robustness.weight_noise_levels=[]",
        "analyzer.robustness.quant_noise_bits=[]",
    ]
    out = modelxray.analyze(overrides, model=model, dataloader=loader, image_shape=(1, 8, 8), output_dir=tmp_path)
    assert not out.failed
    with torch.no_grad():
        expected = (model(x).argmax(1) == y).float().mean().item()
    assert out.metrics["performance/accuracy"] == pytest.approx(expected)
    assert out.metrics["performance/examples_scored"] == 96
    assert "robustness/fgsm_0.1_accuracy" in out.metrics


def test_a_classifier_loader_of_the_wrong_structure_is_one_line(tmp_path):
    loader = torch.utils.data.DataLoader(torch.zeros(4, 1, 8, 8), batch_size=2)
    with pytest.raises(
        ConfigError, match=r"dataloader: yields .*; a classifier's DataLoader yields \(inputs, labels\)"
    ):
        modelxray.analyze(["tracker=none"], model=_cnn(), dataloader=loader, image_shape=(1, 8, 8), output_dir=tmp_path)
