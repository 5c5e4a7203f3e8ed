"""Standard errors of language-model quality: the window as the unit (tokens inside a window are
correlated), checked against a direct computation and against a simulation of the estimator."""

import math

import numpy as np
import pytest
import torch

from modelxray.metrics.lm import LMScore, ratio_se
from modelxray.metrics.measurements import Quality


def test_ratio_se_by_hand():
    a = torch.tensor([10.0, 14.0, 9.0, 15.0], dtype=torch.float64)  # summed NLL of each window
    n = torch.tensor([5.0, 5.0, 4.0, 6.0], dtype=torch.float64)  # scored tokens of each window
    r = a.sum() / n.sum()
    resid = a - r * n
    expected = math.sqrt(4 / 3 * float((resid**2).sum())) / float(n.sum())
    assert ratio_se(a, n) == pytest.approx(expected, rel=1e-12)
    assert math.isnan(ratio_se(a[:1], n[:1]))  # one window: no spread to measure


def test_the_reported_error_matches_the_spread_of_the_estimate_over_simulated_texts():
    """Windows whose tokens share a window-level difficulty (correlated inside a window): the error
    computed from one text agrees with the spread of the mean loss over 400 independent texts, and a
    naive per-token error would be several times too small."""
    rng = np.random.default_rng(0)
    windows, tokens = 32, 64

    def text():
        difficulty = rng.normal(2.0, 0.5, size=(windows, 1))  # shared by the tokens of a window
        return difficulty + rng.normal(0.0, 0.3, size=(windows, tokens))

    estimates, reported, naive = [], [], []
    for _ in range(400):
        nll = text()
        a, n = torch.tensor(nll.sum(1)), torch.full((windows,), float(tokens), dtype=torch.float64)
        estimates.append(nll.mean())
        reported.append(ratio_se(a, n))
        naive.append(nll.std(ddof=1) / math.sqrt(nll.size))
    spread = float(np.std(estimates, ddof=1))
    assert np.median(reported) == pytest.approx(spread, rel=0.15)
    assert np.median(naive) < spread / 3


def test_lm_score_keeps_each_window_and_reports_errors():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 10, 7, generator=g)
    targets = torch.randint(0, 7, (6, 10), generator=g)
    targets[2, :4] = -100  # not scored
    score = LMScore(ks=[1, 5])
    score.update(logits[:3], targets[:3])
    score.update(logits[3:], targets[3:])
    w = score.per_window()
    assert w.shape == (6, 3) and w[2, 1] == 6 and w[:, 1].sum() == score.n_tokens
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, 7), targets.reshape(-1), reduction="none")
    assert float(w[:, 0].sum()) == pytest.approx(float(nll.sum()), rel=1e-6)  # parts add up to the whole
    out = score.result()
    assert out["windows_scored"] == 6 and out["loss_se"] == pytest.approx(ratio_se(w[:, 0], w[:, 1]))
    assert out["accuracy_se"] == pytest.approx(ratio_se(w[:, 2], w[:, 1]))
    q = Quality.from_dict(out)
    low, high = q.perplexity_ci95
    assert low < q.perplexity < high and q.to_metrics()["perplexity_se"] == pytest.approx(q.perplexity * q.loss_se)
    assert "±" in q.markdown() and "in 6 windows" in q.markdown()


def test_paired_delta_loss_against_the_reference(trained_tiny):
    from modelxray.measure.reference import Reference
    from modelxray.metrics.windows import make_windows
    from modelxray.quant.verb import quantize

    loaded, data = trained_tiny
    windows = make_windows(data.ids, data.seq_len, "disjoint")
    ref = Reference(loaded.model, windows, batch_size=4, kl_windows=2)
    same = ref.evaluate(loaded.model)
    assert same["delta_loss"] == pytest.approx(0.0, abs=1e-9) and same["delta_loss_se"] == pytest.approx(0.0, abs=1e-9)
    q, _ = quantize(loaded.model, "int3")
    got = ref.evaluate(q)
    assert got["delta_loss"] == pytest.approx(got["loss"] - ref.metrics["loss"], abs=1e-9)
    # pairing removes the text's own variation: the paired error is below the two losses' combined error
    assert 0 < got["delta_loss_se"] < math.hypot(got["loss_se"], ref.metrics["loss_se"])
    # llama.cpp's KL report: mean with its error, tail percentiles, max, RMS change of the top token's probability
    assert got["kl_max"] >= got["kl_p999"] >= got["kl_p99"] >= got["kl_p90"] >= 0 and got["kl_se"] > 0
    assert 0 < got["rms_dp"] < 1 and 0 < got["top1_agree_se"] < 0.5
    assert same["kl"] == pytest.approx(0.0, abs=1e-6) and same["rms_dp"] == pytest.approx(0.0, abs=1e-6)


def test_token_divergence_and_its_summary_by_hand():
    from modelxray.metrics.lm import divergence_summary, token_divergence

    g = torch.Generator().manual_seed(1)
    ref_logits, logits = torch.randn(3, 5, 6, generator=g), torch.randn(3, 5, 6, generator=g)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1, 3:] = False
    kl, dp, rows = token_divergence(torch.log_softmax(ref_logits, -1), logits, mask)
    p, q = torch.softmax(ref_logits[mask], -1).double(), torch.softmax(logits[mask], -1).double()
    assert torch.allclose(kl, (p * (p.log() - q.log())).sum(-1), atol=1e-6)
    top = p.argmax(-1)
    assert torch.allclose(dp, q[torch.arange(len(top)), top] - p[torch.arange(len(top)), top], atol=1e-6)
    assert rows.tolist() == [0] * 5 + [1] * 3 + [2] * 5
    s = divergence_summary(kl, dp, rows)
    sums = torch.stack([kl[rows == r].sum() for r in range(3)])
    counts = torch.tensor([5.0, 3.0, 5.0], dtype=torch.float64)
    assert s["kl_se"] == pytest.approx(ratio_se(sums, counts))
    assert s["kl_p90"] == pytest.approx(float(np.quantile(kl.numpy(), 0.9)))
    assert s["kl_max"] == pytest.approx(float(kl.max()))
    assert s["kl_max"] >= s["kl_p999"] >= s["kl_p99"] >= s["kl_p90"]
    assert s["rms_dp"] == pytest.approx(float(dp.pow(2).mean().sqrt()))


def test_a_wilson_interval_holds_its_proportion_at_the_ends_exactly():
    from modelxray.metrics.measurements.quality import wilson_interval

    assert wilson_interval(0, 6)[0] == 0.0 and wilson_interval(6, 6)[1] == 1.0  # not 1e-17 beside them
    low, high = wilson_interval(0, 6)
    assert high == pytest.approx(0.39033, abs=1e-5)  # 1.96^2 / (6 + 1.96^2)
