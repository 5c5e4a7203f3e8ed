"""Robustness of classifiers: the digits model and dataset, input-space attacks checked against a
few-line reference, feature perturbations at their limits, and the CLI path ``model=digits_mlp``
(image corruptions: tests/test_robustness_images.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import REPO, mlflow_runs, run_cli
from modelxray.analyzers.robustness import RobustnessAnalyzer
from modelxray.core.errors import ConfigError
from modelxray.core.result import RunContext
from modelxray.core.subject import Subject
from modelxray.data.digits import Digits
from modelxray.models.digits_classifier import DigitsClassifierSource
from modelxray.perturb.classifier_harness import ClassifierHarness
from modelxray.perturb.weight_noise import noise_targets


@pytest.fixture(scope="module")
def harness(mlp, digits):
    return ClassifierHarness(
        mlp.model, digits.x_test, digits.y_test, digits.feature_range, batch_size=100, progress=False
    )


def test_digits_split_is_stratified_disjoint_and_in_range(digits):
    assert digits.x_test.shape == (450, 64) and digits.x_train.shape == (1347, 64)
    assert digits.x_train.min() >= 0 and digits.x_train.max() <= 1
    test, total = (
        torch.bincount(digits.y_test, minlength=10),
        torch.bincount(torch.cat([digits.y_train, digits.y_test])),
    )
    assert ((test - 0.25 * total).abs() <= 1).all()  # stratified: a quarter of every class
    train = {tuple(r.tolist()) for r in digits.x_train}
    assert sum(tuple(r.tolist()) in train for r in digits.x_test) < 10  # only exact duplicate images repeat
    assert Digits(max_test=100).load().n_samples == 100


def test_digits_model_trains_in_seconds_deterministically_and_generalises(mlp, digits):
    again = DigitsClassifierSource(epochs=20, use_disk_cache=False).load()  # trained again, not cached
    for a, b in zip(mlp.model.parameters(), again.model.parameters()):
        assert torch.equal(a, b)
    with torch.inference_mode():
        acc = (mlp.model(digits.x_test).argmax(-1) == digits.y_test).float().mean()
    assert acc > 0.9 and mlp.task == "classification"
    cnn = DigitsClassifierSource(arch="cnn", epochs=3).load()
    assert cnn.model(digits.x_test[:2]).shape == (2, 10)
    assert any(isinstance(m, torch.nn.Conv2d) for m in cnn.model.modules())
    assert {t.name for t in noise_targets(cnn.model, "linear")} == {"1.weight", "3.weight", "7.weight"}


def test_checkpoint_round_trip_and_mismatch(tmp_path, mlp, digits):
    path = tmp_path / "digits.safetensors"
    saved = DigitsClassifierSource(epochs=20, save_checkpoint=str(path)).load()
    loaded = DigitsClassifierSource(checkpoint=str(path)).load()
    assert torch.equal(saved.model(digits.x_test), loaded.model(digits.x_test))
    pt = tmp_path / "digits.pt"
    torch.save(saved.model.state_dict(), pt)
    assert torch.equal(
        DigitsClassifierSource(checkpoint=str(pt)).load().model(digits.x_test), saved.model(digits.x_test)
    )
    with pytest.raises(ConfigError, match="model.checkpoint: .*does not match arch=mlp"):
        DigitsClassifierSource(checkpoint=str(path), hidden=[32]).load()
    with pytest.raises(ConfigError, match="checkpoint: file not found"):
        DigitsClassifierSource(checkpoint=str(tmp_path / "missing.pt"))


def test_our_fgsm_matches_a_few_line_reference(mlp, digits, harness):
    model, x, y = mlp.model, digits.x_test, digits.y_test
    for eps in (0.03, 0.1):
        # the textbook FGSM: one signed-gradient step of the whole-batch loss, clipped to the pixel range
        xr = x.clone().requires_grad_(True)
        F.cross_entropy(model(xr), y).backward()
        x_adv = (x + eps * xr.grad.sign()).clamp(0, 1)
        with torch.no_grad():
            logits = model(x_adv)
        ref_acc = (logits.argmax(-1) == y).float().mean().item()
        ref_loss = F.cross_entropy(logits, y).item()
        ours = harness.attack([eps], 0, None, False, torch.Generator(), harness.size, "")[eps]["fgsm"]
        assert ours["accuracy"] == pytest.approx(ref_acc, abs=1e-9)
        assert ours["loss"] == pytest.approx(ref_loss, rel=1e-5)
        assert ref_acc < harness.clean["accuracy"]


def test_eps_zero_is_clean_and_pgd_beats_fgsm(harness):
    out = harness.attack([0.0, 0.1], 5, None, False, torch.Generator(), harness.size, "")
    for kind in ("fgsm", "pgd"):
        assert out[0.0][kind]["loss"] == pytest.approx(harness.clean["loss"], abs=1e-7)
        assert out[0.0][kind]["top1_agree"] == 1.0
    assert out[0.1]["pgd"]["loss"] >= out[0.1]["fgsm"]["loss"] > harness.clean["loss"]
    assert out[0.1]["pgd"]["accuracy"] <= out[0.1]["fgsm"]["accuracy"]


def test_feature_perturbations_at_their_limits(harness, mlp, digits):
    g = torch.Generator().manual_seed(0)
    for family in ("feature_dropout", "feature_substitution"):
        m = harness.perturb_inputs(family, 0.0, g, "")
        assert m["accuracy"] == harness.clean["accuracy"] and m["top1_agree"] == 1.0
    blank = harness.perturb_inputs("feature_dropout", 1.0, g, "")  # every pixel blank: one constant guess
    with torch.no_grad():
        guess = mlp.model(torch.zeros(1, 64)).argmax().item()
    assert blank["accuracy"] == pytest.approx((digits.y_test == guess).float().mean().item())
    assert blank["top1_agree"] == pytest.approx((harness.clean_logp.argmax(-1) == guess).float().mean().item())


def test_analyzer_on_a_classifier_logs_accuracy_families(mlp, digits, tmp_path):
    subject = Subject(mlp.model, None, digits, mlp.info, task="classification")
    analyzer = RobustnessAnalyzer(
        fgsm_eps=[0.0, 0.1],
        pgd_eps=[0.1],
        pgd_steps=3,
        weight_noise_levels=[0.0, 0.3],
        quant_noise_bits=[8],
        dropout_rates=[0.1],
        substitution_rates=[0.1],
        seeds=2,
        noise_targets="all",
    )
    before = [p.clone() for p in mlp.model.parameters()]
    result = analyzer.run(subject, RunContext(tmp_path, progress=False))
    m = result.metrics
    assert m["fgsm_0_accuracy"] == m["clean_accuracy"] > 0.9
    assert m["weight_noise_0_accuracy"] == m["clean_accuracy"] and m["weight_noise_0_kl"] == pytest.approx(0, abs=1e-9)
    assert m["weight_noise_0.3_accuracy"] < m["clean_accuracy"]
    assert m["pgd_0.1_accuracy"] <= m["pgd_0.1_fgsm_accuracy"] < m["clean_accuracy"]
    assert {"feature_dropout_0.1_accuracy", "feature_substitution_0.1_accuracy_std", "quant_noise_8bit_kl"} <= set(m)
    assert not any("perplexity" in k for k in m)
    assert all(torch.equal(a, b) for a, b in zip(before, mlp.model.parameters()))  # noise undone


@pytest.mark.slow  # several end-to-end runs: `pytest -m slow`
def test_cli_classifier_run_and_clear_errors(tracking_uri, tmp_path, monkeypatch):
    common = ["progress=false", f"tracker.uri={tracking_uri}", "tracker.experiment=digits_cli"]
    proc = run_cli(["model=digits_mlp", "analyzer=robustness", "model.epochs=5", *common], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, runs = mlflow_runs(tracking_uri, "digits_cli")
    (run,) = runs
    assert run.data.params["dataset"] == "digits" and run.data.params["model/name"] == "digits-mlp"
    assert "robustness/fgsm_0.1_accuracy" in run.data.metrics
    assert "robustness/feature_substitution_0.2_accuracy" in run.data.metrics
    # the flat 64 pixels are (1, 8, 8) images: the image corruptions run on their default grids
    for key in (
        "gaussian_noise_0.1_accuracy",
        "blur_1_top1_agree",
        "occlusion_0.5_kl",
        "gaussian_noise_0.4_accuracy_std",
    ):
        assert f"robustness/{key}" in run.data.metrics, key
    assert run.data.metrics["robustness/blur_2_accuracy"] < run.data.metrics["robustness/clean_accuracy"]
    assert len(list((tmp_path / "outputs").rglob("adversarial_robustness.png"))) == 1
    assert len(list((tmp_path / "outputs").rglob("image_corruptions.png"))) == 1

    bad = run_cli(  # feature vectors (one-hot pairs) are no images: explicit image levels are one line
        ["model=mlp", "analyzer=robustness", "analyzer.robustness.blur_sigmas=[1]", *common], cwd=tmp_path
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1].startswith("modelxray: error: analyzer.robustness.blur_sigmas: ")

    # every built-in analyzer fits a classifier: the tests' language-model-only analyzer is one that does not
    monkeypatch.setenv("PYTHONPATH", str(REPO / "tests"))
    boom = "+analyzer.boom._target_=failing_analyzer.BoomAnalyzer"
    bad = run_cli(["model=digits_mlp", "model.epochs=1", "analyzer=performance", boom, *common], cwd=tmp_path)
    assert bad.returncode == 2
    assert (
        "analyzer.boom: analyzes causal_lm models" in bad.stderr
        and "use analyzer=performance, robustness" in bad.stderr
    )
    bad = run_cli(
        ["model=digits_mlp", "analyzer=robustness", "quant=gptq_int4", "model.epochs=1", *common], cwd=tmp_path
    )
    assert bad.returncode == 2 and "quant: calibration-based quantization" in bad.stderr
