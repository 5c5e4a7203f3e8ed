"""Robustness: attacks, noise and token perturbations against hand-checkable limits, and the
design card's flagship sweep ``analyzer=robustness quant=int4,int8 -m`` on the tiny model."""

from __future__ import annotations

import math
import re

import pytest
import torch
from torch import nn

from conftest import mlflow_runs, run_cli
from modelxray.analyzers.robustness import RobustnessAnalyzer
from modelxray.core.errors import ConfigError
from modelxray.core.original_weights import OriginalWeights
from modelxray.core.result import RunContext
from modelxray.metrics.windows import IGNORE, Window, make_windows
from modelxray.perturb.attacks import fgsm, pgd
from modelxray.perturb.lm_harness import LMHarness
from modelxray.perturb.tokens import dropout_windows, substitute_window
from modelxray.perturb.weight_noise import (
    add_gaussian_noise_,
    add_quant_step_noise_,
    noise_targets,
    quant_step,
)


@pytest.fixture(scope="module")
def harness(trained_tiny):
    loaded, data = trained_tiny
    model, ids = loaded.model, data.ids
    windows = make_windows(ids[:1024], 128, "disjoint")[:4]
    return LMHarness(model, windows, batch_size=2, kl_windows=4, progress=False)


def test_eps_zero_attacks_reproduce_clean_metrics_exactly(harness):
    out = harness.attack(
        [0.0], steps=3, step_size=None, random_start=False, generator=torch.Generator(), n_windows=harness.size, desc=""
    )
    for kind in ("fgsm", "pgd"):
        m = out[0.0][kind]
        for key in ("loss", "perplexity", "accuracy"):
            assert m[key] == harness.clean[key], (kind, key)
        assert m["top1_agree"] == 1.0
        assert m["kl"] == pytest.approx(0.0, abs=1e-6)


def test_pgd_loss_is_at_least_fgsm_loss_and_grows_with_eps(harness):
    out = harness.attack(
        [0.1, 0.3],
        steps=5,
        step_size=None,
        random_start=False,
        generator=torch.Generator(),
        n_windows=harness.size,
        desc="",
    )
    for eps in (0.1, 0.3):
        assert out[eps]["pgd"]["loss"] >= out[eps]["fgsm"]["loss"] > harness.clean["loss"]
    assert out[0.3]["fgsm"]["loss"] > out[0.1]["fgsm"]["loss"]


def test_attack_gradient_in_parts_is_the_whole_batch_gradient(trained_tiny):
    """Windows attacked one at a time (the memory default) get the gradient of the whole batch's mean loss."""
    from modelxray.perturb.embedding_shift import EmbeddingShift, frozen

    loaded, data = trained_tiny
    windows = make_windows(data.ids[:1024], 128, "disjoint")[:3]
    grads = {}
    for step in (1, 2, 3):
        h = LMHarness(loaded.model, windows, batch_size=3, kl_windows=0, progress=False, attack_batch_size=step)
        inputs, targets = h.ref.batches[0]
        with frozen(h.model), EmbeddingShift(h.embedding) as shift:
            shape = (*inputs.shape, h.embedding.weight.shape[1])
            delta = torch.zeros(shape).normal_(0, 0.01, generator=torch.Generator().manual_seed(0))
            grads[step] = h._grad_fn(shift, inputs, targets)(delta)
    whole = grads[3]
    assert whole.abs().sum() > 0
    for step in (1, 2):
        assert torch.allclose(grads[step], whole, rtol=1e-4, atol=1e-9), step
        assert (grads[step].sign() == whole.sign()).float().mean() > 0.999


def test_attacks_stay_inside_the_ball_and_bounds():
    x0 = torch.rand(5, 7)
    grad_fn = lambda x: torch.randn_like(x)  # noqa: E731
    x = pgd(
        x0,
        grad_fn,
        eps=0.05,
        steps=7,
        step_size=0.03,
        random_start=True,
        generator=torch.Generator().manual_seed(0),
        bounds=(0.0, 1.0),
    )
    assert (x - x0).abs().max() <= 0.05 + 1e-7 and x.min() >= 0 and x.max() <= 1
    g = torch.tensor([1.0, -2.0, 0.0])
    assert fgsm(torch.zeros(3), g, 0.1).tolist() == pytest.approx([0.1, -0.1, 0.0])


@pytest.mark.parametrize("where", ["disk", "memory"])
def test_noise_at_level_zero_changes_nothing_and_snapshot_restores(harness, where, tmp_path):
    targets = noise_targets(harness.model, "linear")
    snap = OriginalWeights(harness.model, where, tmp_path, [t.name for t in targets])
    before = [t.param.detach().clone() for t in targets]
    add_gaussian_noise_(targets, 0.0, torch.Generator().manual_seed(0))
    assert all(torch.equal(a, t.param) for a, t in zip(before, targets))
    assert harness.evaluate("")["loss"] == harness.clean["loss"]
    add_quant_step_noise_(targets, 4, torch.Generator().manual_seed(0))
    assert not torch.equal(before[0], targets[0].param)
    snap.restore()
    assert all(torch.equal(a, t.param) for a, t in zip(before, targets))
    assert len(snap.entries) == len(targets) and list(tmp_path.iterdir()) == []  # an unnamed file


def test_gaussian_noise_has_the_tensor_std_times_level(harness):
    targets = noise_targets(harness.model, "linear")
    t = max(targets, key=lambda t: t.param.numel())
    snap = OriginalWeights(harness.model, "memory", names=[t.name])
    w = t.param.detach().clone()
    add_gaussian_noise_([t], 0.5, torch.Generator().manual_seed(0))
    ratio = float((t.param - w).std() / w.std())
    snap.restore()
    assert ratio == pytest.approx(0.5, rel=0.05)


def test_quant_step_is_min_max_range_over_levels_per_output_channel():
    w = torch.tensor([[0.0, 1.0, 3.0], [-1.0, 0.0, 1.0]])
    assert quant_step(w, 2, channel_dim=0).flatten().tolist() == pytest.approx([1.0, 2 / 3])
    assert quant_step(w.t(), 2, channel_dim=1).flatten().tolist() == pytest.approx([1.0, 2 / 3])  # GPT-2 Conv1D layout
    assert float(quant_step(w, 2, channel_dim=0, granularity="tensor")) == pytest.approx(4 / 3)


def test_noise_target_sets():
    from modelxray.models.tiny_gpt2 import TinyGPT2Source

    model = TinyGPT2Source().load().model
    linear = noise_targets(model, "linear")
    assert linear and all("wte" not in t.name and "wpe" not in t.name for t in linear)
    assert all(t.channel_dim == 1 for t in linear)  # GPT-2's Conv1D stores (in, out)
    matrices = {t.name for t in noise_targets(model, "matrices")}
    assert "transformer.wte.weight" in matrices
    assert len(noise_targets(model, "all")) == len(list(model.parameters()))


def test_token_dropout_rates_zero_and_one_behave_as_defined(harness):
    g = torch.Generator().manual_seed(0)
    assert [w.inputs.tolist() for w in dropout_windows(harness.windows, 0.0, g)] == [
        w.inputs.tolist() for w in harness.windows
    ]
    assert dropout_windows(harness.windows, 1.0, g) == []
    assert harness.token_dropout(0.0, g, "")["loss"] == harness.clean["loss"]
    gone = harness.token_dropout(1.0, g, "")
    assert gone["tokens_scored"] == 0 and math.isnan(gone["loss"])


def test_substitution_ignores_replaced_targets():
    w = Window(torch.arange(10), torch.cat([torch.arange(1, 10), torch.tensor([IGNORE])]))
    all_replaced = substitute_window(w, 1.0, 50, torch.Generator().manual_seed(0))
    assert (all_replaced.targets == IGNORE).all()
    none = substitute_window(w, 0.0, 50, torch.Generator().manual_seed(0))
    assert torch.equal(none.inputs, w.inputs) and torch.equal(none.targets, w.targets)
    half = substitute_window(w, 0.5, 50, torch.Generator().manual_seed(1))
    changed = (half.inputs != w.inputs).nonzero().flatten().tolist()
    assert all(half.targets[i - 1] == IGNORE for i in changed if i > 0)


def test_analyzer_is_deterministic_and_names_metrics(trained_tiny, tmp_path):
    from modelxray.core.subject import ModelInfo, Subject
    from modelxray.data.base import TokenData

    loaded, data = trained_tiny
    ids = data.ids[:1024]
    subject = Subject(loaded.model, None, TokenData("t", ids, 1024, 128, 1024), ModelInfo("t", "config", "fp32"))
    a = RobustnessAnalyzer(
        eval_windows=4,
        batch_size=2,
        kl_windows=2,
        fgsm_eps=[0.03],
        pgd_eps=[0.03],
        pgd_steps=2,
        pgd_windows=1,
        weight_noise_levels=[0.05],
        quant_noise_bits=[4],
        dropout_rates=[0.1],
        substitution_rates=[0.1],
    )
    r1 = a.run(subject, RunContext(tmp_path, seed=0, progress=False))
    r2 = a.run(subject, RunContext(tmp_path, seed=0, progress=False))
    assert r1.metrics == r2.metrics
    for key in (
        "clean_perplexity",
        "fgsm_0.03_perplexity",
        "fgsm_0.03_top1_agree",
        "fgsm_0.03_kl",
        "fgsm_0.03_gap",
        "pgd_0.03_perplexity",
        "pgd_0.03_fgsm_perplexity",
        "weight_noise_0.05_perplexity",
        "weight_noise_0.05_perplexity_std",
        "quant_noise_4bit_perplexity",
        "token_dropout_0.1_perplexity",
        "token_substitution_0.1_top1_agree",
    ):
        assert key in r1.metrics, key
    r3 = a.run(subject, RunContext(tmp_path, seed=1, progress=False))
    assert r3.metrics["weight_noise_0.05_loss"] != r1.metrics["weight_noise_0.05_loss"]


def test_analyzer_level_zero_is_clean_and_dropout_one_scores_nothing(trained_tiny, tmp_path):
    """Through the analyzer on a language model: eps 0, weight noise 0 and rates 0 give the clean
    metrics exactly; dropout 1.0 leaves nothing to score (NaN, not logged); the weights come back."""
    from modelxray.core.subject import ModelInfo, Subject
    from modelxray.data.base import TokenData

    loaded, data = trained_tiny
    ids = data.ids[:512]
    subject = Subject(loaded.model, None, TokenData("t", ids, 512, 128, 512), ModelInfo("t", "config", "fp32"))
    before = [p.detach().clone() for p in loaded.model.parameters()]
    a = RobustnessAnalyzer(
        eval_windows=4,
        batch_size=2,
        kl_windows=4,
        fgsm_eps=[0.0],
        pgd_eps=[0.0],
        pgd_steps=2,
        pgd_windows=4,
        weight_noise_levels=[0.0],
        quant_noise_bits=[],
        seeds=2,
        dropout_rates=[0.0, 1.0],
        substitution_rates=[0.0],
    )
    r = a.run(subject, RunContext(tmp_path, seed=0, progress=False))
    m = r.metrics
    for prefix in ("fgsm_0", "pgd_0", "weight_noise_0", "token_dropout_0", "token_substitution_0"):
        assert m[f"{prefix}_loss"] == m["clean_loss"] and m[f"{prefix}_perplexity"] == m["clean_perplexity"], prefix
        assert m[f"{prefix}_gap"] == 0.0, prefix
    for prefix in ("fgsm_0", "pgd_0", "weight_noise_0", "token_substitution_0"):
        assert m[f"{prefix}_top1_agree"] == 1.0 and m[f"{prefix}_kl"] == pytest.approx(0.0, abs=1e-6), prefix
    assert m["weight_noise_0_perplexity_std"] == 0.0
    assert not [k for k in m if k.startswith("token_dropout_1_")]  # NaN metrics are not logged
    (gone,) = [row for row in r.tables["robustness"] if row["family"] == "token_dropout" and row["level"] == 1.0]
    assert gone["tokens_scored"] == 0 and math.isnan(gone["perplexity"])
    assert all(torch.equal(x, y) for x, y in zip(before, loaded.model.parameters()))


@pytest.mark.parametrize(
    "bad,match",
    [
        ({"dropout_rates": [1.5]}, "dropout_rates"),
        ({"noise_targets": "heads"}, "noise_targets"),
        ({"pgd_steps": 0}, "pgd_steps"),
        ({"attack_batch_size": 0}, "attack_batch_size"),
    ],
)
def test_bad_config_is_one_clear_error(bad, match):
    with pytest.raises(ConfigError, match=match):
        RobustnessAnalyzer(**bad)


def test_model_without_embedding_gets_a_clear_error():
    from modelxray.perturb.embedding_shift import input_embedding

    with pytest.raises(ConfigError, match="nn.Embedding"):
        input_embedding(nn.Sequential(nn.Linear(3, 3)))


@pytest.mark.slow  # a run.py process end to end (the CI runs the slow suite too)
def test_flagship_sweep_gives_two_comparable_mlflow_runs(tiny, tracking_uri, tmp_path):
    fast = [
        "analyzer.robustness.eval_windows=2",
        "analyzer.robustness.batch_size=2",
        "analyzer.robustness.pgd_steps=2",
        "analyzer.robustness.pgd_windows=1",
        "analyzer.robustness.seeds=1",
        "analyzer.robustness.fgsm_eps=[0.03]",
        "analyzer.robustness.pgd_eps=[0.03]",
        "analyzer.robustness.weight_noise_levels=[0.1]",
        "analyzer.robustness.quant_noise_bits=[4]",
        "analyzer.robustness.dropout_rates=[0.1]",
        "analyzer.robustness.substitution_rates=[0.1]",
    ]
    base = [o for o in tiny if not o.startswith("analyzer.performance.")]
    proc = run_cli(
        ["analyzer=robustness", "quant=int4,int8", *base, *fast, f"hydra.sweep.dir={tmp_path}/multirun", "-m"],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, runs = mlflow_runs(tracking_uri, "test_flagship_sweep_gives_two_comparable_mlflow_runs")
    assert len(runs) == 2 and all(r.info.status == "FINISHED" for r in runs)
    assert {r.data.params["quant"] for r in runs} == {"int4", "int8"}
    names = [{k for k in r.data.metrics if k.startswith("robustness/")} for r in runs]
    assert names[0] == names[1] and "robustness/fgsm_0.03_perplexity" in names[0]
    # robustness/<family>_<level>_<metric>, besides the clean reference and the analyzer's time
    family = r"(fgsm|pgd|weight_noise|quant_noise|token_dropout|token_substitution)"
    level = r"(\d+(\.\d+)?|\d+bit)"
    pattern = re.compile(rf"robustness/({family}_{level}_[a-z0-9_]+|clean_[a-z]+|seconds)")
    assert not [k for k in names[0] if not pattern.fullmatch(k)]
    assert {
        f"robustness/{f}_{lv}_perplexity"
        for f, lv in (
            ("pgd", "0.03"),
            ("weight_noise", "0.1"),
            ("quant_noise", "4bit"),
            ("token_dropout", "0.1"),
            ("token_substitution", "0.1"),
        )
    } <= names[0]
    plots = sorted(str(p.relative_to(p.parents[1])) for p in (tmp_path / "multirun").rglob("*_robustness.png"))
    assert plots == sorted(
        2 * ["plots/adversarial_robustness.png", "plots/noise_robustness.png", "plots/perturbation_robustness.png"]
    )
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    for r in runs:
        logged = {a.path for a in client.list_artifacts(r.info.run_id, "plots")}
        assert {
            "plots/adversarial_robustness.png",
            "plots/noise_robustness.png",
            "plots/perturbation_robustness.png",
        } <= logged
    from conftest import load_script

    compare = load_script("compare_runs")
    text = compare.table(
        tracking_uri,
        "test_flagship_sweep_gives_two_comparable_mlflow_runs",
        ["quant"],
        ["robustness/fgsm_*_perplexity"],
    )
    assert "robustness/fgsm_0.03_perplexity" in text and "| int4 |" in text and "| int8 |" in text


def test_the_degradation_tolerance_of_the_insights_is_a_key():
    from modelxray.analyzers.robustness import RobustnessAnalyzer
    from modelxray.analyzers.robustness.insights import level_insights

    rows = [
        {"family": "gaussian_noise", "level": lv, "accuracy": acc, "samples": 100}
        for lv, acc in ((0.1, 0.88), (0.2, 0.7))
    ]
    clean = {"accuracy": 0.9}
    strict_cfg, loose_cfg = (
        RobustnessAnalyzer(degradation_tolerance=0.01),
        RobustnessAnalyzer(degradation_tolerance=0.5),
    )
    (strict,) = level_insights(rows, clean, "accuracy", "samples", strict_cfg)
    (loose,) = level_insights(rows, clean, "accuracy", "samples", loose_cfg)
    assert strict.startswith("gaussian_noise: out of bounds from level 0.1 (noise std, pixel units) (100 samples), ")
    assert "decided by accuracy 0.88 vs clean 0.9 (more than 1% off)" in strict
    assert loose.startswith("gaussian_noise: within bounds up to level 0.2")
    assert "accuracy stays within 50% of clean (0.9)" in loose and "agreement not measured" in loose
