"""A model that has learnt nothing is named first in the insights and the report, before any claim
that it is robust or loses nothing to quantization."""

import pytest
import torch
from torch import nn

import modelxray
from modelxray.core.errors import ConfigError
from modelxray.metrics.degenerate import classifier_signs, language_model_signs


def test_signs_of_a_classifier_that_learnt_nothing():
    labels = torch.arange(100) % 10  # balanced: always one class scores 0.1
    constant = torch.zeros(100, 10)
    constant[:, 3] = 1.0
    (same, chance) = classifier_signs(constant, labels, 0.95)
    assert same == "its outputs are the same for every input (class 3 always)"
    assert chance.startswith("its accuracy 0.100 (95% interval 0.055-0.174) is no better than always answering")
    collapsed = torch.zeros(100, 10)
    collapsed[:96, 7] = 5.0
    collapsed[96:, 0] = 5.0
    assert classifier_signs(collapsed, labels, 0.95)[0] == "it predicts class 7 for 96.0% of the 100 examples"
    good = torch.nn.functional.one_hot(labels, 10).float() + 0.01 * torch.randn(100, 10)
    assert classifier_signs(good, labels, 0.95) == []
    assert language_model_signs(40000.0, 49152, 0.5)[0].startswith("its perplexity 40,000 is 81% of its 49,152-token")
    assert language_model_signs(19.97, 49152, 0.5) == []
    with pytest.raises(ConfigError, match="collapse_share"):
        modelxray.analyze(["analyzer.performance.collapse_share=1.5"])


def test_a_chance_level_classifier_is_flagged_before_its_robustness(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    nn.init.zeros_(model[1].weight)
    nn.init.zeros_(model[1].bias)  # every input scores every class alike: class 0 always
    args = ["dataset=digits", "analyzer=[performance,robustness]", "tracker=none", "progress=false", "threads=1"]
    args += ["report.dashboard=false", "analyzer.performance.iters=1", "analyzer.robustness.eval_samples=64"]
    args += ["analyzer.robustness.seeds=1", "analyzer.robustness.pgd_eps=[]"]
    out = modelxray.analyze(args, model=model, image_shape=(1, 8, 8), output_dir=tmp_path / "run")
    assert out.failed == []
    insights = (tmp_path / "run" / "insights.md").read_text()
    first_section = insights.split("## ")[1]
    assert first_section.startswith("model check") and "Degenerate model: its outputs are the same" in first_section
    assert insights.index("## model check") < insights.index("## robustness")
    report = (tmp_path / "run" / "summary_report.md").read_text()
    assert report.index("> **Warning.** Degenerate model") < report.index("## performance")
