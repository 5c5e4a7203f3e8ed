"""Statistics of one parameter tensor (their aggregation by layer type: ``tensor_aggregate``).

Built for speed on a CPU (``scripts/bench_inspect.py``: >= 1 GB/s of float32 on 2 cores, 2.8x
the straightforward torch version): a tensor is read in chunks of 2 MiB, twice (pass 1: min,
max, sum, sum of squares; pass 2: everything that needs them), every chunk op writes into a
few buffers kept between calls, so the passes run from cache, no tensor is copied and half
precision is converted chunk by chunk. The histogram is integer bucketing + ``bincount`` (3x
faster than ``histc``), counts read sign bits instead of bool masks, large tensors run on two
threads (see ``two_threads.on_two_threads``), and the spectral norm is a block Krylov iteration with an
error bound (6x faster than ``matrix_norm(ord=2)`` over SmolLM2's weights). Pure functions:
tensors in, JSON-able dicts out.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np
import torch

from modelxray.metrics.spectral import spectral_norm
from modelxray.metrics.tensor_aggregate import aggregate  # noqa: F401 - re-exported: callers import it from here
from modelxray.metrics.two_threads import on_two_threads as _on_two_threads

SPECTRAL = ("power", "exact", "none")
PRUNE_ENERGY = 0.01  # prune_potential: share of the squared L2 norm that may be lost
_CHUNK = 1 << 19  # elements per chunk: 2 MiB of float32; a chunk and its buffers stay in cache
_TWO_THREADS_MIN = 1 << 21  # tensors from this size are split between two threads
_FINE_BINS = 4096  # at least this many fine histogram bins (for prune_potential)


@dataclass
class StatsConfig:
    """Settings of ``tensor_stats``; ``small_threshold`` is relative: near zero means
    ``|x| < small_threshold * max|x|`` (an absolute threshold means nothing across layers whose
    scales differ by orders of magnitude)."""

    bins: int = 256  # histogram bins between min and max
    outlier_k: float = 3.0  # outlier: |x - mean| > k * std
    small_threshold: float = 1e-3  # near zero: |x| < small_threshold * max|x|
    spectral: str = "power"  # power: block Krylov to spectral_rtol (see spectral_norm) | exact (SVD) | none
    spectral_rtol: float = 1e-3  # stop when the relative error bound of the spectral norm is below this
    spectral_max_iters: int = 300
    sensitivity_bits: int = 4  # bit width of the quantization-sensitivity indicator
    seed: int = 0


DEFAULT = StatsConfig()


def _undefined(bins: int) -> dict:
    """The statistics of an empty tensor, or of one holding NaN or Inf: NaN, no counts."""
    nan = math.nan
    return {
        **{
            k: nan
            for k in (
                "mean",
                "std",
                "min",
                "max",
                "abs_mean",
                "zeros_share",
                "small_share",
                "entropy_bits",
                "kurtosis",
                "skewness",
                "l1",
                "l2",
                "linf",
                "outlier_share",
            )
        },
        "hist_counts": [0] * bins,
        "hist_edges": [nan] * (bins + 1),
    }


def _matrix_keys_none() -> dict:
    return {
        "spectral_norm": None,
        "spectral_rel_error": None,
        "stable_rank": None,
        "quant_sensitivity": None,
        "prune_potential": None,
    }


def tensor_stats(t: torch.Tensor, cfg: StatsConfig = DEFAULT) -> dict:
    """Statistics of ``t`` as a JSON-able dict (every key always present).

    - ``shape``, ``numel``, ``bytes`` (numel x element size of ``t``'s own dtype), ``dtype``.
    - ``mean``, ``std`` (population, ddof=0), ``min``, ``max``, ``abs_mean``, ``l1``, ``l2``
      (Frobenius), ``linf``; ``skewness`` and ``kurtosis`` (excess, Fisher, biased: equal to
      ``scipy.stats.skew`` / ``scipy.stats.kurtosis`` defaults; NaN for a constant tensor).
    - ``zeros_share``: exact zeros; ``small_share``: ``|x| < small_threshold * linf``;
      ``outlier_share``: ``|x - mean| > outlier_k * std``.
    - ``hist_counts`` (``bins`` ints) over ``hist_edges`` (``bins + 1`` floats from min to max,
      the last bin closed as in ``numpy.histogram``; a constant tensor gets ``[v - 0.5, v + 0.5]``
      as numpy does). The edges are evenly spaced up to one float of the tensor's dtype: they are
      the exact boundaries of the bucketing, so ``numpy.histogram(x, edges)`` returns the counts.
    - ``entropy_bits``: Shannon entropy in bits of the normalised counts, ``-sum p log2 p`` (0 =
      one value; log2(bins) = spread evenly over the range; it measures how the values fill the
      range, so a few large outliers, which stretch the range, lower it).

    Precision: float32 tensors are summed per chunk in float32 and across chunks in float64;
    mean, std and the norms are exact to ~1e-7 relative, skewness and kurtosis (3rd/4th power
    sums as float32 dot products) to ~1e-5.

    A tensor holding NaN or Inf gets NaN statistics and no counts (and ``None`` below).

    For tensors with 2 or more dimensions, viewed as a matrix ``W = t.reshape(shape[0], -1)``
    (rows = output channels, as for Linear and conv weights); ``None`` for 1-D tensors (biases,
    norms) and empty ones:

    - ``spectral_norm`` (largest singular value, see ``spectral_norm``), ``spectral_rel_error``
      (its relative error bound: 0 for ``exact``), ``stable_rank = ||W||_F^2 / ||W||_2^2``
      (1 for rank one, n for an orthogonal n x n; a soft count of the directions that carry
      energy). All three ``None`` when ``cfg.spectral == "none"``.
    - ``quant_sensitivity = ||W - Q(W)||_F / ||W||_F`` where Q rounds every row to the nearest of
      the ``2^b - 1`` levels ``{-q..q} * max|row| / q``, ``q = 2^(b-1) - 1`` (b =
      ``sensitivity_bits``; b = 1 is taken as ternary, q = 1): the relative error that symmetric
      per-output-channel round-to-nearest quantization would add. Uniform-like rows give about
      ``1 / (sqrt(3) * 2q) * max/rms``; outliers stretch the step, so heavy-tailed rows score
      higher. Higher = keep at higher precision; 0 = already on such a grid.
    - ``prune_potential``: the share of the elements (by count) that can be set to zero, smallest
      magnitude first, while removing at most 1% of ``||W||_F^2``. Exact zeros always count;
      the rest is read from a histogram of at least 4,096 bins (values assumed evenly spread
      within a bin), so it is exact to about one bin's share of the elements. A Gaussian tensor
      scores 0.26; higher = more prunable by magnitude at almost no change of the weights.
    """
    shape = list(t.shape)
    n = t.numel()
    out: dict = {"shape": shape, "numel": n, "bytes": n * t.element_size(), "dtype": str(t.dtype).replace("torch.", "")}
    matrix = t.dim() >= 2 and n > 0
    if n == 0:
        out.update(_undefined(cfg.bins), l1=0.0, l2=0.0, linf=0.0)
        out.update(_matrix_keys_none())
        return out
    wdtype = torch.float64 if t.dtype == torch.float64 else torch.float32
    rows = shape[0] if matrix else 1
    x2d = t.detach().reshape(rows, -1)  # a view when contiguous
    out.update(_scalar_stats(x2d, wdtype, cfg, quant=matrix))
    if not matrix:
        out.update(_matrix_keys_none())
        return out
    if cfg.spectral == "none" or math.isnan(out["l2"]):
        sigma = err = None
    elif cfg.spectral == "exact":
        sigma, err = float(torch.linalg.matrix_norm(x2d.to(wdtype), ord=2)), 0.0
    elif cfg.spectral == "power":
        sigma, err, _ = spectral_norm(x2d, cfg.spectral_rtol, cfg.spectral_max_iters, cfg.seed)
    else:
        raise ValueError(f"spectral must be one of {SPECTRAL}, got {cfg.spectral!r}")
    out["spectral_norm"], out["spectral_rel_error"] = sigma, err
    out["stable_rank"] = None if sigma is None else (out["l2"] / sigma) ** 2 if sigma > 0 else 0.0
    return out


def _chunks(x2d: torch.Tensor, parts: int) -> list[torch.Tensor]:
    """Row-aligned chunks of at most about ``_CHUNK`` elements, of about equal size, at least
    ``parts`` (views; a 1-D tensor, one long row, is cut anywhere). On a GPU: the whole tensor."""
    rows, cols = x2d.shape
    if x2d.device.type != "cpu":
        return [x2d]
    nc = max(-(-rows * cols // _CHUNK), parts)
    if rows == 1:
        flat = x2d.reshape(-1)
        step = -(-cols // nc)
        return [flat[s : s + step].unsqueeze(0) for s in range(0, cols, step)]
    step = -(-rows // min(nc, rows))
    return [x2d[r : r + step] for r in range(0, rows, step)]


_scratch = threading.local()


def _buffers(size: int, wdtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
    """This thread's chunk buffers, kept between calls (allocating and page-faulting them for
    every tensor costs more than the statistics of a small tensor); oversized ones are not kept."""
    key = (wdtype, device)
    bufs = getattr(_scratch, "bufs", {}).get(key)
    if bufs is None or bufs[0].numel() < size:
        ints = torch.int32 if wdtype == torch.float32 else torch.int64
        bufs = (
            torch.empty(size, dtype=wdtype, device=device),
            torch.empty(size, dtype=wdtype, device=device),
            torch.empty(size, dtype=ints, device=device),
            torch.empty(size, dtype=torch.int64, device=device),
        )
        if size <= 2 * _CHUNK:
            _scratch.bufs = {key: bufs}  # one dtype and device at a time
    return bufs


def _count_below(v: torch.Tensor) -> int:
    """Number of elements of ``v`` below zero, clobbering ``v``: the sign bit, shifted down, is
    -1 exactly when the value is negative (2x faster than a comparison into a bool mask)."""
    bits = v.view(torch.int32 if v.dtype == torch.float32 else torch.int64)
    bits.bitwise_right_shift_(bits.element_size() * 8 - 1)
    return -int(bits.sum(dtype=bits.dtype))


def _exact_edges(lo: float, hi: float, scale: float, bins: int, fine: int, dtype: type) -> list[float]:
    """Histogram edges that are exactly the bucket boundaries of pass 2, whose bucket is
    ``trunc(fl(fl(x - lo) * scale))`` in the tensor's float type: edge i is the smallest float
    whose bucket reaches ``i * fine``, so ``numpy.histogram(x, bins=edges)`` gives the same counts
    (evenly spaced edges would differ by float rounding for about 1e-5 of the values). Both
    operations are monotone: find the smallest y with ``fl(y * scale) >= target``, then the
    smallest x with ``fl(x - lo) >= y``, each by stepping one float from an estimate."""
    f = dtype
    lo_f, s_f = f(lo), f(scale)
    target = np.arange(1, bins, dtype=np.float64) * fine
    down, up = f(-np.inf), f(np.inf)

    def smallest(x: np.ndarray, ok) -> tuple[np.ndarray, np.ndarray]:
        for _ in range(8):  # one or two steps in practice
            below, prev = ~ok(x), np.nextafter(x, down)
            prev_ok = ok(prev)
            if not (below.any() or prev_ok.any()):
                return x, np.ones(x.shape, bool)
            x = np.where(below, np.nextafter(x, up), np.where(prev_ok, prev, x))
        return x, ok(x) & ~ok(np.nextafter(x, down))

    with np.errstate(over="ignore", invalid="ignore"):
        y, ok_y = smallest((target / scale).astype(f), lambda v: (v * s_f).astype(np.float64) >= target)
        mid = np.float64(lo_f) + (np.nextafter(y, f(0)).astype(np.float64) + y) / 2
        x, ok_x = smallest(mid.astype(f), lambda v: (v - lo_f) >= y)
    edges = x.astype(np.float64)
    bad = ~(ok_y & ok_x)
    if bad.any():  # never seen in the tests: keep the evenly spaced edge
        edges[bad] = np.linspace(lo, hi, bins + 1)[1:-1][bad]
    return [lo, *edges.tolist(), hi]


def _pass1(chunks: list[torch.Tensor], wdtype: torch.dtype) -> tuple[float, float, float, float]:
    """min, max, sum and sum of squares (per chunk in wdtype, accumulated in float64)."""
    lo, hi, total, sumsq = math.inf, -math.inf, 0.0, 0.0
    for c in chunks:
        xc = c.reshape(-1).to(wdtype)
        cmin, cmax = torch.aminmax(xc)
        lo, hi = min(lo, float(cmin)), max(hi, float(cmax))
        total += float(xc.sum())
        sumsq += float(torch.dot(xc, xc))
    return lo, hi, total, sumsq


@dataclass
class _Pass2:
    wdtype: torch.dtype
    mean: float  # as represented in wdtype
    edge_lo: float
    scale: float  # fine buckets per unit
    nfine: int
    small_thr: float
    outlier_thr: float | None  # None: outliers are counted in pass 3
    qmax: int
    quant: bool


def _pass2(chunks: list[torch.Tensor], p: _Pass2) -> tuple:
    """Centred power sums, fine histogram, counts and squared quantization error of the chunks."""
    device = chunks[0].device
    buf1, buf2, ibuf, lbuf = _buffers(max(c.numel() for c in chunks), p.wdtype, device)
    ints = ibuf.dtype
    hist = torch.zeros(p.nfine + 1, dtype=torch.int64, device=device)
    out_thr = None if p.outlier_thr is None else torch.tensor(p.outlier_thr**2, dtype=p.wdtype, device=device)
    s1 = s2 = s3 = s4 = l1 = qerr = 0.0
    nonzero = small = inliers = 0
    for c in chunks:
        c = c.to(p.wdtype)
        xc = c.reshape(-1)
        k = xc.numel()
        d, e, ib, lb = buf1[:k], buf2[:k], ibuf[:k], lbuf[:k]
        torch.sub(xc, p.mean, out=d)
        s1 += float(d.sum())
        torch.mul(d, d, out=e)
        s2 += float(e.sum())  # a sum of squares by summation, not dot: 100x more accurate
        s3 += float(torch.dot(e, d))
        s4 += float(torch.dot(e, e))
        if out_thr is not None:
            torch.sub(out_thr, e, out=e)  # (k*std)^2 - (x - mean)^2 < 0: an outlier
            inliers += k - _count_below(e)
        torch.sub(xc, p.edge_lo, out=e)  # the bucket: trunc(fl(fl(x - lo) * scale)), see _exact_edges
        e.mul_(p.scale)
        ib.copy_(e)  # truncation = floor (all >= 0); the maximum lands in bucket nfine
        lb.copy_(ib)  # bincount is fastest on int64, the conversion fastest via int32
        hist += torch.bincount(lb, minlength=p.nfine + 1)
        torch.abs(xc, out=e)
        nonzero += int(torch.count_nonzero(e.view(ints)))  # on the bits (faster); -0.0 is +0 here
        l1 += float(e.sum())
        if p.quant:
            step = e.view(c.shape).amax(dim=1, keepdim=True).clamp_min_(torch.finfo(p.wdtype).tiny).div_(p.qmax)
            q = d.view(c.shape)
            torch.mul(c, step.reciprocal(), out=q)
            q.round_().mul_(step).sub_(c)
            qerr += float(torch.dot(d, d))
        small += _count_below(e.sub_(p.small_thr))
    return s1, s2, s3, s4, l1, qerr, nonzero, small, inliers, hist


def _pass3(chunks: list[torch.Tensor], wdtype: torch.dtype, mean: float, thr: float) -> int:
    """Elements within ``thr`` of ``mean`` (outliers, when the one-pass std was not exact enough)."""
    buf = _buffers(max(c.numel() for c in chunks), wdtype, chunks[0].device)[1]
    t = torch.tensor(thr, dtype=wdtype, device=buf.device)
    inliers = 0
    for c in chunks:
        xc = c.reshape(-1).to(wdtype)
        e = buf[: xc.numel()]
        torch.sub(xc, mean, out=e)
        e.abs_()
        torch.sub(t, e, out=e)
        inliers += xc.numel() - _count_below(e)
    return inliers


def _scalar_stats(x2d: torch.Tensor, wdtype: torch.dtype, cfg: StatsConfig, quant: bool) -> dict:
    n = x2d.numel()
    threads = torch.get_num_threads()
    two = n >= _TWO_THREADS_MIN and threads > 1 and x2d.device.type == "cpu"
    chunks = _chunks(x2d, 2 if two else 1)
    f = np.float32 if wdtype == torch.float32 else np.float64  # scalars as the chunk ops see them
    if two:
        torch.set_num_threads(1)  # see two_threads.on_two_threads; restored below
    try:
        lo, hi, total, sumsq = math.inf, -math.inf, 0.0, 0.0
        for glo, ghi, gtot, gsq in _on_two_threads(_pass1, chunks, two, wdtype):
            lo, hi, total, sumsq = min(lo, glo), max(hi, ghi), total + gtot, sumsq + gsq
        if not all(map(math.isfinite, (lo, hi, total, sumsq))):  # NaN or Inf somewhere
            return {**_undefined(cfg.bins), **({"quant_sensitivity": None, "prune_potential": None} if quant else {})}
        mean = total / n
        var_est = sumsq / n - mean * mean
        linf = max(-lo, hi)
        bins = cfg.bins
        fine = max(1, _FINE_BINS // bins) if quant else 1  # the fine bins serve prune_potential
        nfine = bins * fine
        edge_lo, edge_hi = (lo, hi) if hi > lo else (float(f(lo - 0.5)), float(f(hi + 0.5)))
        # the outlier threshold is needed before pass 2 ends: the one-pass variance is exact enough
        # where cancellation cannot hurt (|mean| <= std); otherwise outliers get a third pass
        early = var_est >= 0.5 * sumsq / n
        p = _Pass2(
            wdtype=wdtype,
            mean=float(f(mean)),
            edge_lo=edge_lo,
            scale=float(f(nfine / (edge_hi - edge_lo))),
            nfine=nfine,
            small_thr=cfg.small_threshold * linf,
            outlier_thr=cfg.outlier_k * math.sqrt(var_est) if early else None,
            qmax=max(2 ** (cfg.sensitivity_bits - 1) - 1, 1),
            quant=quant,
        )
        s1 = s2 = s3 = s4 = l1 = qerr = 0.0
        nonzero = small = inliers = 0
        hist = None
        for r in _on_two_threads(_pass2, chunks, two, p):
            s1, s2, s3, s4, l1, qerr = (a + b for a, b in zip((s1, s2, s3, s4, l1, qerr), r[:6]))
            nonzero, small, inliers = nonzero + r[6], small + r[7], inliers + r[8]
            hist = r[9] if hist is None else hist + r[9]

        dm = s1 / n  # p.mean differs from the mean by rounding: correct the moments for it
        c2 = s2 / n - dm * dm
        c3 = s3 / n - 3 * dm * s2 / n + 2 * dm**3
        c4 = s4 / n - 4 * dm * s3 / n + 6 * dm * dm * s2 / n - 3 * dm**4
        skew, kurt = (c3 / c2**1.5, c4 / (c2 * c2) - 3.0) if c2 > 0 else (math.nan, math.nan)
        std = math.sqrt(max(c2, 0.0))
        if not early:  # pass 3: outliers, now that the std is exact
            inliers = sum(_on_two_threads(_pass3, chunks, two, wdtype, p.mean + dm, cfg.outlier_k * std))
    finally:
        if two:
            torch.set_num_threads(threads)

    hist = hist.cpu().numpy()
    hist[nfine - 1] += hist[nfine]
    fine_counts = hist[:nfine]
    counts = fine_counts.reshape(bins, fine).sum(1) if fine > 1 else fine_counts
    prob = counts[counts > 0] / n
    energy = n * (c2 + (p.mean + dm) ** 2)
    zeros = n - nonzero
    out = {
        "mean": p.mean + dm,
        "std": std,
        "min": lo,
        "max": hi,
        "abs_mean": l1 / n,
        "zeros_share": zeros / n,
        "small_share": small / n,
        "hist_counts": counts.tolist(),
        "hist_edges": _exact_edges(edge_lo, edge_hi, p.scale, bins, fine, f),
        "entropy_bits": float(-(prob * np.log2(prob)).sum()),
        "kurtosis": kurt,
        "skewness": skew,
        "l1": l1,
        "l2": math.sqrt(max(energy, 0.0)),
        "linf": linf,
        "outlier_share": (n - inliers) / n,
    }
    if quant:
        out["quant_sensitivity"] = math.sqrt(qerr / energy) if energy > 0 else 0.0
        out["prune_potential"] = _prune_potential(fine_counts, edge_lo, edge_hi, p.scale, f, zeros, energy, n)
    return out


def _prune_potential(
    counts: np.ndarray, lo: float, hi: float, scale: float, f: type, zeros: int, energy: float, n: int
) -> float:
    """Share of elements removable smallest-|x|-first within ``PRUNE_ENERGY`` of ``energy``, from
    the fine histogram: each bin's energy is its count times the mean square of a uniform spread
    over the bin, bins are taken in order of that mean square, the last one fractionally; exact
    zeros (their bin is known: the bucket of 0) cost nothing and go first."""
    if energy <= 0:
        return 1.0
    nb = counts.size
    w = (hi - lo) / nb
    a = lo + w * np.arange(nb)
    ms = a * (a + w) + w * w / 3  # mean of x^2 for x uniform on [a, a + w]
    c = counts.astype(np.float64)
    if zeros:
        c[min(int(f(f(0.0 - f(lo)) * f(scale))), nb - 1)] -= zeros
    order = np.argsort(ms, kind="stable")  # ms falls then rises: two sorted runs, merged in O(n)
    c = c[order]
    be = c * ms[order]
    cum = np.cumsum(be)
    budget = PRUNE_ENERGY * energy
    full = int(np.searchsorted(cum, budget, side="right"))
    removed = zeros + float(cum.size and c[:full].sum())
    if full < nb and be[full] > 0:
        removed += c[full] * (budget - (cum[full - 1] if full else 0.0)) / be[full]
    return min(removed / n, 1.0)
