"""Per-tensor statistics against independent implementations (numpy, scipy, torch.linalg)."""

import json
import math

import numpy as np
import pytest
import scipy.stats
import torch

from modelxray.metrics import tensor_stats as ts
from modelxray.metrics.tensor_stats import (
    StatsConfig,
    aggregate,
    spectral_norm,
    tensor_stats,
)

NONE = StatsConfig(spectral="none")


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _heavy(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Heavy-tailed (a Gaussian scale mixture, excess kurtosis ~ 20), reproducible."""
    g = _gen(seed)
    return torch.randn(shape, generator=g) * torch.exp(torch.randn(shape, generator=g))


def _tensors() -> dict[str, torch.Tensor]:
    g = _gen()
    zeros = torch.randn(300, 400, generator=g)
    zeros[torch.rand(300, 400, generator=g) < 0.3] = 0.0
    return {
        "normal": torch.randn(300, 1000, generator=g) * 0.02 + 0.001,  # parallel path (> 64k elements)
        "large_mean": 1000.0 + 1e-2 * torch.randn(300, 1000, generator=g),  # float32, mean >> std
        "heavy_tailed": _heavy((200, 500), 20),
        "exact_zeros": zeros,
        "small_matrix": torch.randn(17, 23, generator=g),  # inline path
        "vector": torch.randn(777, generator=g) + 3.0,
        "float64": torch.randn(50, 60, generator=g, dtype=torch.float64),
    }


@pytest.fixture(scope="module")
def computed() -> dict[str, tuple[torch.Tensor, dict]]:
    return {name: (t, tensor_stats(t, NONE)) for name, t in _tensors().items()}


@pytest.mark.parametrize("name", list(_tensors()))
def test_moments_match_numpy_and_scipy(computed, name):
    t, r = computed[name]
    x = t.double().numpy().ravel()  # the exact values, in float64
    std = x.std()
    assert r["mean"] == pytest.approx(x.mean(), abs=1e-6 * std, rel=1e-12)
    assert r["std"] == pytest.approx(std, rel=1e-6)
    assert r["min"] == x.min() and r["max"] == x.max()
    assert r["linf"] == np.abs(x).max()
    assert r["abs_mean"] == pytest.approx(np.abs(x).mean(), rel=1e-6)
    assert r["l1"] == pytest.approx(np.abs(x).sum(), rel=1e-6)
    assert r["l2"] == pytest.approx(np.sqrt((x * x).sum()), rel=1e-6)
    assert r["skewness"] == pytest.approx(scipy.stats.skew(x), abs=2e-4)
    assert r["kurtosis"] == pytest.approx(scipy.stats.kurtosis(x), rel=1e-4, abs=2e-4)
    n = x.size
    assert r["zeros_share"] == (x == 0).sum() / n
    assert r["small_share"] == (np.abs(x) < 1e-3 * np.abs(x).max()).sum() / n
    assert r["outlier_share"] == pytest.approx((np.abs(x - x.mean()) > 3 * std).sum() / n, abs=1.5 / n)
    assert r["numel"] == n and r["shape"] == list(t.shape)
    assert r["bytes"] == n * t.element_size() and r["dtype"] == str(t.dtype).removeprefix("torch.")


def test_scipy_on_float32_input_agrees_too(computed):
    t, r = computed["large_mean"]
    assert r["kurtosis"] == pytest.approx(scipy.stats.kurtosis(t.numpy().ravel()), abs=1e-3)
    assert r["skewness"] == pytest.approx(scipy.stats.skew(t.numpy().ravel()), abs=1e-3)


@pytest.mark.parametrize("name", list(_tensors()))
def test_histogram_equals_numpy_with_the_same_edges(computed, name):
    t, r = computed[name]
    counts, edges = np.array(r["hist_counts"]), np.array(r["hist_edges"])
    assert counts.size == 256 and edges.size == 257 and counts.sum() == t.numel()
    assert edges[0] == r["min"] and edges[-1] == r["max"]
    ulp = float(np.spacing(np.array(r["linf"], dtype=t.numpy().dtype)))  # edges are values of the dtype
    assert np.allclose(edges, np.linspace(r["min"], r["max"], 257), rtol=0, atol=1e-6 * (r["max"] - r["min"]) + ulp)
    np.testing.assert_array_equal(np.histogram(t.numpy().ravel(), bins=edges)[0], counts)
    assert r["entropy_bits"] == pytest.approx(scipy.stats.entropy(counts, base=2), rel=1e-12)


def test_histogram_is_exact_for_values_on_the_nominal_edges():
    g = _gen(1)
    x = torch.randn(200, 400, generator=g)
    lo, hi = float(x.min()), float(x.max())
    x.view(-1)[:257] = torch.linspace(lo, hi, 257, dtype=torch.float64).float()  # the hard cases
    r = tensor_stats(x, StatsConfig(spectral="none", bins=100))
    assert len(r["hist_counts"]) == 100
    np.testing.assert_array_equal(np.histogram(x.numpy().ravel(), bins=np.array(r["hist_edges"]))[0], r["hist_counts"])


def test_constant_and_empty_tensors():
    r = tensor_stats(torch.full((40, 3), 2.5), NONE)
    assert r["std"] == 0 and math.isnan(r["kurtosis"]) and math.isnan(r["skewness"])
    assert r["hist_edges"][0] == 2.0 and r["hist_edges"][-1] == 3.0 and sum(r["hist_counts"]) == 120
    assert r["entropy_bits"] == 0 and r["quant_sensitivity"] == pytest.approx(0, abs=1e-7)
    e = tensor_stats(torch.empty(0, 5))
    assert e["numel"] == 0 and e["spectral_norm"] is None
    bad = torch.randn(30, 40)
    bad[3, 4] = float("nan")
    b = tensor_stats(bad)
    assert math.isnan(b["mean"]) and sum(b["hist_counts"]) == 0 and b["spectral_norm"] is None
    bad[3, 4] = float("inf")
    assert math.isnan(tensor_stats(bad)["std"])
    for res in (r, e, b):
        assert set(res) == set(tensor_stats(torch.randn(3, 3)))
        json.dumps(res)


def _ill_conditioned(m: int, n: int, top: list[float], seed: int) -> torch.Tensor:
    g = _gen(seed)
    k = min(m, n)
    u = torch.linalg.qr(torch.randn(m, k, generator=g, dtype=torch.float64))[0]
    v = torch.linalg.qr(torch.randn(n, k, generator=g, dtype=torch.float64))[0]
    s = torch.linspace(0.5, 0.01, k, dtype=torch.float64)
    s[: len(top)] = torch.tensor(top, dtype=torch.float64)
    return (u * s) @ v.t()


MATRICES = {
    "random_tall": lambda: torch.randn(400, 150, generator=_gen(2)),
    "random_wide": lambda: torch.randn(90, 500, generator=_gen(3)),
    "gap_1.001": lambda: _ill_conditioned(300, 200, [1.0, 0.999], 4).float(),
    "gap_1.0001_float64": lambda: _ill_conditioned(200, 300, [1.0, 0.9999], 5),
    "cluster_of_8": lambda: _ill_conditioned(256, 256, [1.0, 0.998, 0.997, 0.996, 0.995, 0.99, 0.99, 0.985], 6),
    "rank_one": lambda: torch.outer(torch.randn(64, generator=_gen(7)), torch.randn(80, generator=_gen(8))),
}


@pytest.mark.parametrize("name", list(MATRICES))
@pytest.mark.parametrize("rtol", [1e-3, 1e-5])
def test_spectral_norm_within_its_bound(name, rtol):
    w = MATRICES[name]()
    exact = float(torch.linalg.matrix_norm(w.double(), ord=2))
    sigma, bound, iters = spectral_norm(w, rtol=rtol, max_iters=300, seed=0)
    err = (exact - sigma) / exact
    assert bound <= max(rtol, 8 * torch.finfo(w.dtype).eps * math.sqrt(max(w.shape)))
    assert abs(err) <= bound  # the bound bounds the true error
    assert err >= -1e-6  # a Ritz value is a lower bound, up to rounding
    assert iters >= 1


def test_spectral_norm_is_deterministic_under_the_seed_and_reports_an_unconverged_bound():
    w = _ill_conditioned(300, 200, [1.0, 0.9995, 0.999], 9).float()
    assert spectral_norm(w, seed=3) == spectral_norm(w, seed=3)
    sigma, bound, iters = spectral_norm(w, rtol=1e-9, max_iters=2)
    assert iters == 2 and bound > 1e-9
    assert (1.0 - sigma) <= bound  # still honest when stopped early


def test_stable_rank_of_rank_one_and_orthogonal_matrices():
    r = tensor_stats(MATRICES["rank_one"]())
    assert r["stable_rank"] == pytest.approx(1.0, rel=2e-3)
    q = torch.linalg.qr(torch.randn(64, 64, generator=_gen(10), dtype=torch.float64))[0].float()
    r = tensor_stats(q)
    assert r["stable_rank"] == pytest.approx(64, rel=2e-3)
    exact = tensor_stats(q, StatsConfig(spectral="exact"))
    assert exact["spectral_rel_error"] == 0 and exact["stable_rank"] == pytest.approx(64, rel=1e-5)


def test_quant_sensitivity_is_zero_on_a_per_channel_4bit_grid():
    g = _gen(11)
    q = torch.randint(-7, 8, (64, 96), generator=g).float()
    q[:, 0] = 7.0  # every row reaches the top level, so max|row| / 7 is the grid step
    scales = 2.0 ** torch.randint(-12, -2, (64, 1), generator=g).float()
    r = tensor_stats(q * scales, StatsConfig(spectral="none", sensitivity_bits=4))
    assert r["quant_sensitivity"] == pytest.approx(0.0, abs=1e-7)
    r8 = tensor_stats(q * scales + 1e-3 * torch.randn(64, 96, generator=g), StatsConfig(spectral="none"))
    assert r8["quant_sensitivity"] > 1e-3


def test_quant_sensitivity_matches_a_direct_computation():
    w = _heavy((300, 500), 21) * 0.02
    for bits in (2, 4, 8):
        qmax = 2 ** (bits - 1) - 1
        step = w.abs().amax(1, keepdim=True) / qmax
        ref = float(torch.linalg.norm(w - torch.round(w / step) * step) / torch.linalg.norm(w))
        r = tensor_stats(w, StatsConfig(spectral="none", sensitivity_bits=bits))
        assert r["quant_sensitivity"] == pytest.approx(ref, rel=1e-4)


def _prune_reference(x: np.ndarray, energy: float = 0.01) -> float:
    sq = np.sort(x.astype(np.float64).ravel() ** 2)
    return np.searchsorted(np.cumsum(sq), energy * sq.sum(), side="right") / sq.size


def test_prune_potential():
    g = _gen(12)
    sparse = torch.randn(200, 300, generator=g)
    sparse[torch.rand(200, 300, generator=g) < 0.9] = 0.0
    r = tensor_stats(sparse, NONE)
    assert r["prune_potential"] >= 0.9 and r["zeros_share"] >= 0.89
    for t in (torch.randn(300, 400, generator=g), _heavy((100, 300), 22), torch.rand(50, 70, generator=g) + 0.5):
        p = tensor_stats(t, NONE)["prune_potential"]
        assert p == pytest.approx(_prune_reference(t.numpy()), abs=3e-3)
    assert tensor_stats(torch.zeros(10, 10), NONE)["prune_potential"] == 1.0


def test_vectors_get_scalar_stats_only():
    r = tensor_stats(torch.randn(576, generator=_gen(13)))
    for key in ("spectral_norm", "spectral_rel_error", "stable_rank", "quant_sensitivity", "prune_potential"):
        assert key in r and r[key] is None
    assert r["std"] > 0 and len(r["hist_counts"]) == 256


def test_half_precision_inputs_match_their_float32_conversion():
    w = torch.randn(300, 500, generator=_gen(14)) * 0.05
    for dtype in (torch.float16, torch.bfloat16):
        h = w.to(dtype)
        r, ref = tensor_stats(h), tensor_stats(h.float())
        assert r["dtype"] == str(dtype).removeprefix("torch.") and r["bytes"] == h.numel() * 2
        for key in ("mean", "std", "kurtosis", "hist_counts", "quant_sensitivity", "spectral_norm", "outlier_share"):
            assert r[key] == pytest.approx(ref[key], rel=1e-9, abs=1e-12), key


def test_conv_weight_gets_the_spectral_stats_of_its_out_channel_matrix():
    w = torch.randn(32, 16, 3, 3, generator=_gen(15))
    r = tensor_stats(w)
    mat = w.reshape(32, -1)
    exact = float(torch.linalg.matrix_norm(mat.double(), ord=2))
    assert r["shape"] == [32, 16, 3, 3]
    assert abs(r["spectral_norm"] - exact) / exact <= r["spectral_rel_error"] <= 1e-3
    assert r["stable_rank"] == pytest.approx(float((mat.double() ** 2).sum()) / exact**2, rel=3e-3)
    step = mat.abs().amax(1, keepdim=True) / 7
    ref = float(torch.linalg.norm(mat - torch.round(mat / step) * step) / torch.linalg.norm(mat))
    assert r["quant_sensitivity"] == pytest.approx(ref, rel=1e-4)  # per output channel


def test_results_are_json_and_key_set_is_stable(computed):
    keys = {
        "shape",
        "numel",
        "bytes",
        "dtype",
        "mean",
        "std",
        "min",
        "max",
        "abs_mean",
        "zeros_share",
        "small_share",
        "hist_counts",
        "hist_edges",
        "entropy_bits",
        "kurtosis",
        "skewness",
        "l1",
        "l2",
        "linf",
        "outlier_share",
        "spectral_norm",
        "spectral_rel_error",
        "stable_rank",
        "quant_sensitivity",
        "prune_potential",
    }
    for _, r in computed.values():
        assert set(r) == keys
        json.dumps(r)


def test_chunks_and_two_threads_change_nothing(monkeypatch):
    w = _heavy((700, 300), 23) * 0.1
    one = tensor_stats(w)  # one chunk, on the calling thread
    monkeypatch.setattr(ts, "_CHUNK", 20_000)  # 11 chunks of 64 rows ...
    monkeypatch.setattr(ts, "_TWO_THREADS_MIN", 1000)  # ... on two threads
    threads = torch.get_num_threads()
    many = tensor_stats(w)
    assert torch.get_num_threads() == threads  # restored
    assert one["hist_counts"] == many["hist_counts"] and one["hist_edges"] == many["hist_edges"]
    assert many["mean"] == pytest.approx(one["mean"], abs=1e-6 * one["std"])
    for key in ("std", "l1", "l2", "quant_sensitivity", "prune_potential"):
        assert many[key] == pytest.approx(one[key], rel=1e-6), key
    for key in ("kurtosis", "skewness"):  # 3rd and 4th power sums are float32 dot products per chunk
        assert many[key] == pytest.approx(one[key], rel=2e-5), key
    for key in ("min", "max", "zeros_share", "small_share", "outlier_share", "spectral_norm"):
        assert many[key] == one[key], key


def test_aggregate_by_type():
    g = _gen(16)
    rows = [{"name": f"l{i}.w", "type": "Linear", **tensor_stats(torch.randn(20, 30, generator=g))} for i in range(3)]
    rows += [{"name": "emb", "type": "Embedding", **tensor_stats(torch.randn(100, 30, generator=g))}]
    rows += [{"name": f"n{i}", "type": "RMSNorm", **tensor_stats(torch.ones(30) + 0.01 * i)} for i in range(2)]
    agg = {a["type"]: a for a in aggregate(rows, "type")}
    assert [a["type"] for a in aggregate(rows)] == ["Embedding", "Linear", "RMSNorm"]  # by parameters
    assert agg["Linear"]["tensors"] == 3 and agg["Linear"]["parameters"] == 1800
    assert agg["Linear"]["bytes"] == 7200 and agg["Embedding"]["parameters"] == 3000
    assert sum(a["parameters"] for a in agg.values()) == sum(r["numel"] for r in rows)
    lin = [r for r in rows if r["type"] == "Linear"]
    assert agg["Linear"]["std"] == pytest.approx(sum(r["std"] for r in lin) / 3)  # equal sizes: plain mean
    assert agg["Linear"]["kurtosis_max"] == max(r["kurtosis"] for r in lin)
    assert agg["Linear"]["min"] == min(r["min"] for r in lin)
    assert agg["RMSNorm"]["stable_rank"] is None and agg["RMSNorm"]["quant_sensitivity"] is None
    assert len({tuple(a) for a in agg.values()}) == 1  # every row has the same keys
    json.dumps(agg)


def test_two_threads_work_in_a_forked_child(monkeypatch):
    import multiprocessing as mp

    monkeypatch.setattr(ts, "_TWO_THREADS_MIN", 1000)
    monkeypatch.setattr(ts, "_CHUNK", 20_000)
    w = torch.randn(300, 200, generator=_gen(17))
    expected = tensor_stats(w, NONE)["hist_counts"]  # starts the helper thread here
    ctx = mp.get_context("fork")
    with ctx.Pool(1) as pool:
        got = pool.apply_async(_hist_counts, (w,)).get(timeout=60)
    assert got == expected


def _hist_counts(w: torch.Tensor) -> list[int]:
    return tensor_stats(w, NONE)["hist_counts"]
