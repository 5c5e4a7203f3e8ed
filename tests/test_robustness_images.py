"""Robustness to image corruptions (Gaussian noise, blur, occlusion): the pure functions at their
limits and against scipy, the classifier harness on the flat-64 digits MLP, the analyzer's metrics,
plot and insights, and the skip (note) or one-line error on models without images."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from modelxray.analyzers.robustness import RobustnessAnalyzer
from modelxray.core.errors import ConfigError
from modelxray.core.result import RunContext
from modelxray.core.subject import ModelInfo, Subject
from modelxray.perturb.classifier_harness import IMAGE_FAMILIES, ClassifierHarness
from modelxray.perturb.images import gaussian_blur, gaussian_noise, occlude, patch_positions, patch_size

OFF = dict(
    fgsm_eps=[], pgd_eps=[], weight_noise_levels=[], quant_noise_bits=[], dropout_rates=[], substitution_rates=[]
)
LARGEST = {"gaussian_noise": 0.5, "blur": 2.0, "occlusion": 0.75}


@pytest.fixture(scope="module")
def harness(mlp, digits):
    shape = digits.meta["image_shape"]
    return ClassifierHarness(
        mlp.model, digits.x_test, digits.y_test, digits.feature_range, 100, progress=False, image_shape=shape
    )


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _all(harness, family, level, seed=0) -> torch.Tensor:
    return torch.cat(list(harness.corrupted(family, level, _gen(seed))))


# -- the pure functions -------------------------------------------------------------------------
def test_level_zero_is_the_identity_and_noise_stays_in_range():
    x = torch.rand(6, 3, 9, 7)
    assert gaussian_noise(x, 0.0, _gen(), (0.0, 1.0)) is x
    assert gaussian_blur(x, 0.0) is x
    assert occlude(x, 0.0, patch_positions(6, 9, 7, 0.0, _gen()), 0.5) is x
    noisy = gaussian_noise(x, 2.0, _gen(), (0.0, 1.0))
    assert noisy.min() >= 0.0 and noisy.max() <= 1.0 and not torch.equal(noisy, x)
    assert torch.equal(noisy, gaussian_noise(x, 2.0, _gen(), (0.0, 1.0)))  # seeded
    assert not torch.equal(noisy, gaussian_noise(x, 2.0, _gen(1), (0.0, 1.0)))
    small = gaussian_noise(x * 0.5 + 0.25, 0.01, _gen(), (0.0, 1.0)) - (x * 0.5 + 0.25)  # never clipped
    assert small.std().item() == pytest.approx(0.01, rel=0.05)


@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.0, 3.0, 10.0])
def test_blur_keeps_constants_and_each_images_mean_with_symmetric_padding(sigma):
    """Symmetric (half-sample) reflection padding: every pixel's weights sum to one both ways, so
    the mean of each image and channel is kept exactly, borders included, even for kernels far
    wider than the 8x8 image (sigma 10: radius 30)."""
    x = torch.rand(5, 3, 8, 8)
    blurred = gaussian_blur(x, sigma)
    assert torch.allclose(blurred.mean((2, 3)), x.mean((2, 3)), atol=1e-6)
    assert blurred.std() < x.std()  # it does smooth
    const = torch.full((2, 1, 8, 8), 0.3)
    assert torch.allclose(gaussian_blur(const, sigma), const, atol=1e-6)
    assert blurred.min() >= x.min() - 1e-6 and blurred.max() <= x.max() + 1e-6  # convex combinations


@pytest.mark.parametrize("sigma", [0.5, 1.0, 1.5, 2.0])
def test_blur_matches_scipy_gaussian_filter_in_reflect_mode(sigma):
    from scipy.ndimage import gaussian_filter

    x = torch.rand(4, 2, 11, 9, dtype=torch.float64)
    ours = gaussian_blur(x, sigma).numpy()
    # scipy's "reflect" is the half-sample mirror (d c b a | a b c d); radius int(3 sigma + 0.5) = ceil(3 sigma) here
    ref = gaussian_filter(x.numpy(), sigma=(0, 0, sigma, sigma), mode="reflect", truncate=3.0)
    assert np.allclose(ours, ref, atol=1e-6)


def test_occlusion_patches_are_square_seeded_inside_and_side_one_is_constant():
    x = torch.rand(50, 2, 8, 8) * 0.4  # never equal to the fill
    corners = patch_positions(50, 8, 8, 0.5, _gen())
    assert torch.equal(corners, patch_positions(50, 8, 8, 0.5, _gen()))
    assert corners.min() >= 0 and corners.max() <= 4 and len({tuple(c) for c in corners.tolist()}) > 5
    out = occlude(x, 0.5, corners, 0.9)
    filled = out == 0.9
    assert (filled.sum((1, 2, 3)) == 2 * 16).all()  # a 4x4 patch in both channels
    for img, (top, left) in zip(filled, corners.tolist()):
        assert img[:, top : top + 4, left : left + 4].all()
    assert patch_size(0.01, 8, 8) == (1, 1) and patch_size(0.25, 224, 224) == (56, 56)
    whole = occlude(x, 1.0, patch_positions(50, 8, 8, 1.0, _gen()), 0.5)
    assert (whole == 0.5).all()


# -- the harness on the flat-64 digits MLP ------------------------------------------------------
def test_flat_digits_are_corrupted_as_8x8_images_and_stay_in_range(harness, digits):
    x = digits.x_test
    for family in IMAGE_FAMILIES:
        for level in (0.0, 1.0, 3.0 if family != "occlusion" else 1.0):
            out = _all(harness, family, level)
            assert out.shape == x.shape and out.min() >= 0.0 and out.max() <= 1.0, (family, level)
    blurred = _all(harness, "blur", 1.0)
    assert torch.allclose(blurred, gaussian_blur(x.reshape(-1, 1, 8, 8), 1.0).reshape(-1, 64))
    assert torch.allclose(blurred.mean(1), x.mean(1), atol=1e-6)  # the mean brightness of every digit
    assert torch.equal(_all(harness, "gaussian_noise", 0.0), x)
    assert (_all(harness, "occlusion", 1.0) == 0.5).all()  # every image constant (mid-grey)


def test_level_zero_reproduces_clean_metrics_exactly(harness):
    for family in IMAGE_FAMILIES:
        m = harness.perturb_inputs(family, 0.0, _gen(), "")
        assert m["loss"] == harness.clean["loss"] and m["accuracy"] == harness.clean["accuracy"], family
        assert m["top1_agree"] == 1.0 and m["kl"] == 0.0, family


def test_occlusion_of_the_whole_image_is_one_constant_guess(harness, mlp, digits):
    m = harness.perturb_inputs("occlusion", 1.0, _gen(), "")
    with torch.no_grad():
        guess = mlp.model(torch.full((1, 64), 0.5)).argmax().item()
    assert m["accuracy"] == pytest.approx((digits.y_test == guess).float().mean().item())


def test_accuracy_falls_with_the_level_on_the_trained_mlp(harness):
    clean = harness.clean["accuracy"]
    assert clean > 0.9
    for family, top in LARGEST.items():
        # the mean over 3 seeds: accuracy is non-increasing in expectation
        acc = [
            np.mean([harness.perturb_inputs(family, lv, _gen(s), "")["accuracy"] for s in range(3)])
            for lv in (top / 4, top / 2, top)
        ]
        assert acc[2] < clean - 0.1 and acc[2] <= acc[1] <= acc[0] <= clean + 0.01, (family, acc)


def test_the_harness_rejects_shapes_and_families_it_cannot_corrupt(mlp, digits):
    flat = ClassifierHarness(mlp.model, digits.x_test[:8], digits.y_test[:8], (0.0, 1.0), 8, progress=False)
    with pytest.raises(ValueError, match="feature vectors"):
        flat.corrupted("blur", 1.0, _gen())
    with pytest.raises(ValueError, match="does not hold the 64 features"):
        ClassifierHarness(mlp.model, digits.x_test[:8], digits.y_test[:8], (0.0, 1.0), 8, False, (1, 4, 4))


def test_images_fit_to_an_image_model_are_corrupted_in_nchw(digits, tmp_path):
    """As after ``model=hf dataset=digits``: the pixels resized to the model's (C, H, W), which
    ``meta["image_shape"]`` then holds; the model takes (N, C, H, W) batches."""
    from modelxray.data.images import fit_images

    fitted = fit_images(
        dataclasses.replace(digits, x_test=digits.x_test[:40], y_test=digits.y_test[:40]), (3, 16, 16), "m"
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(784, 10)
        )
    h = ClassifierHarness(net, fitted.x_test, fitted.y_test, (0.0, 1.0), 16, False, fitted.meta["image_shape"])
    blurred = _all(h, "blur", 2.0)
    assert blurred.shape == (40, 3, 16, 16) and torch.allclose(
        blurred.mean((2, 3)), fitted.x_test.mean((2, 3)), atol=1e-6
    )
    info = ModelInfo("conv", "config", "fp32")
    a = RobustnessAnalyzer(**OFF, seeds=1, gaussian_noise_sigmas=[0.0, 0.3], occlusion_sides=[1.0])
    r = a.run(Subject(net, None, fitted, info, task="classification"), RunContext(tmp_path, progress=False))
    assert r.data["image_corruptions"]["image_shape"] == [3, 16, 16]
    assert r.metrics["gaussian_noise_0_kl"] == 0.0 and r.metrics["gaussian_noise_0.3_kl"] > 0.0
    assert r.metrics["occlusion_1_top1_agree"] < 1.0 and "blur_2_accuracy" in r.metrics


# -- the analyzer -------------------------------------------------------------------------------
def _subject(mlp, data):
    return Subject(mlp.model, None, data, mlp.info, task="classification")


def _reloaded(result, analyzer, out_dir):
    """``result`` as a resumed run loads it back: from ``results/robustness.json``, drawn by ``analyzer``."""
    from modelxray.report.result_file import load_result, save_result

    return load_result(save_result(out_dir, analyzer.name, result), source=analyzer)


def test_analyzer_logs_image_families_deterministically_with_insights_and_a_plot(mlp, digits, tmp_path):
    a = RobustnessAnalyzer(**OFF, gaussian_noise_sigmas=[0.0, 0.1, 0.5], blur_sigmas=[0.0, 2.0], seeds=2)
    subject = _subject(mlp, digits)
    a.preflight(subject)
    r1 = a.run(subject, RunContext(tmp_path, seed=0, progress=False))
    r2 = a.run(subject, RunContext(tmp_path, seed=0, progress=False))
    m = r1.metrics
    assert m == r2.metrics  # the same seed, the same draws
    for fam, lv in (("gaussian_noise", "0"), ("blur", "0"), ("occlusion", "0.25")):
        for metric in ("loss", "accuracy", "top1_agree", "kl", "gap"):
            assert f"{fam}_{lv}_{metric}" in m, (fam, metric)
    assert m["gaussian_noise_0_accuracy"] == m["blur_0_accuracy"] == m["clean_accuracy"]
    assert m["gaussian_noise_0_loss"] == m["clean_loss"] and m["gaussian_noise_0_kl"] == 0.0
    assert m["gaussian_noise_0.5_accuracy"] < m["clean_accuracy"] and m["blur_2_accuracy"] < m["clean_accuracy"]
    assert {"gaussian_noise_0.1_accuracy_std", "occlusion_0.75_accuracy"} <= set(m)  # occlusion: default grid
    rows = {(r["family"], r["level"]): r for r in r1.tables["robustness"]}
    assert rows[("gaussian_noise", 0.1)]["seeds"] == 2 and rows[("blur", 2.0)]["seeds"] == 1  # blur: no draws
    assert r1.data["image_corruptions"]["image_shape"] == [1, 8, 8]
    r3 = a.run(subject, RunContext(tmp_path, seed=1, progress=False))
    assert r3.metrics["gaussian_noise_0.5_kl"] != m["gaussian_noise_0.5_kl"]
    # insights.md asks the config's hook, which reads the Result alone: the work writes no sentence, a
    # Result reloaded from results/robustness.json (a resumed run) says the same, a failed one nothing
    said = a.insights(r1, {})
    assert r1.insights == [] and said == a.insights(_reloaded(r1, a, tmp_path), {})
    (blur,) = [s for s in said if s.startswith("blur:")]
    assert "from level 2 (blur std, pixels)" in blur
    assert said[-1].startswith("Memory: The original values of ")
    assert a.insights(dataclasses.replace(r1, error="boom"), {}) == []
    figures = a.figures(r1)
    assert "image_corruptions.png" in figures and len(figures["image_corruptions.png"].axes) == 6
    import matplotlib.pyplot as plt

    plt.close("all")


def test_full_grid_and_bad_levels():
    full = RobustnessAnalyzer(image_grid="full")
    assert full.image_grid == "full" and full.gaussian_noise_sigmas is None
    for bad, key in (
        ({"occlusion_sides": [1.5]}, "occlusion_sides"),
        ({"blur_sigmas": [-1.0]}, "blur_sigmas"),
        ({"occlusion_fill": "white"}, "occlusion_fill"),
        ({"image_grid": "huge"}, "image_grid"),
    ):
        with pytest.raises(ConfigError, match=f"^{key}: "):
            RobustnessAnalyzer(**bad)


def test_feature_vectors_are_skipped_with_a_note_unless_levels_are_set(mlp, digits, tmp_path):
    vectors = dataclasses.replace(digits, meta={})
    subject = _subject(mlp, vectors)
    a = RobustnessAnalyzer(**OFF)
    a.preflight(subject)
    r = a.run(subject, RunContext(tmp_path, progress=False))
    assert "feature vectors" in r.data["image_corruptions"]["skipped"]
    assert a.insights(r, {})[-1] == r.data["image_corruptions"]["skipped"] + "."  # said last in insights.md
    assert not [k for k in r.metrics if k.startswith(IMAGE_FAMILIES)]
    RobustnessAnalyzer(**OFF, blur_sigmas=[]).preflight(subject)  # [] = off: fine anywhere
    with pytest.raises(ConfigError, match=r"^blur_sigmas: image corruptions need image data") as err:
        RobustnessAnalyzer(**OFF, blur_sigmas=[1.0]).preflight(subject)
    assert "\n" not in str(err.value)
    assert str(err.value.under("analyzer.robustness")).startswith("analyzer.robustness.blur_sigmas: ")


def test_language_models_skip_image_families_and_reject_explicit_levels(tmp_path):
    from modelxray.data.base import TokenData
    from modelxray.models.tiny_gpt2 import TinyGPT2Source

    loaded = TinyGPT2Source(device="cpu").load()  # untrained: only the path matters here
    ids = torch.randint(0, loaded.model.config.vocab_size, (256,), generator=_gen())
    subject = Subject(loaded.model, None, TokenData("t", ids, 256, 128, 256), ModelInfo("t", "config", "fp32"))
    a = RobustnessAnalyzer(**{**OFF, "dropout_rates": [0.1]}, eval_windows=2, batch_size=2, kl_windows=2, seeds=1)
    a.preflight(subject)
    r = a.run(subject, RunContext(tmp_path, progress=False))
    assert "tokens, not images" in r.data["image_corruptions"]["skipped"]
    assert "token_dropout_0.1_perplexity" in r.metrics and not [k for k in r.metrics if k.startswith(IMAGE_FAMILIES)]
    assert not any("image" in s for s in a.insights(r, {}))
    with pytest.raises(ConfigError, match=r"^gaussian_noise_sigmas: .*tokens, not images"):
        RobustnessAnalyzer(gaussian_noise_sigmas=[0.1]).preflight(subject)


def test_integer_inputs_skip_input_space_attacks_with_a_note(tmp_path):
    """Modular arithmetic feeds (a, b) integer pairs: FGSM has nothing to step in, weight noise still runs."""
    import modelxray

    out = modelxray.analyze(
        ["model=mlp", "dataset.p=11", "analyzer=robustness", "tracker=none", "progress=false"],
        output_dir=tmp_path / "run",
    )
    result = out.results["robustness"]
    assert result.ok, result.error
    assert "inputs are integers" in result.data["input_attacks"]["skipped"]
    families = {r["family"] for r in result.tables["robustness"]}
    assert "fgsm" not in families and {"weight_noise", "quant_noise"} <= families
    said = result.source.insights(result, out.results)
    assert said[0] == (
        "Inputs are integers, not features: input-space attacks and feature corruption do not apply; "
        "weight and quantization noise still do."
    )
    saved = _reloaded(result, result.source, tmp_path / "again")
    assert result.insights == [] and said == saved.source.insights(saved, out.results)
