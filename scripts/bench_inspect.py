"""Benchmark: the inspect analyzer's parameter statistics (``metrics/tensor_stats.py``).

    python scripts/bench_inspect.py                    # embedded default (SmolLM2-135M)
    python scripts/bench_inspect.py --model tiny_gpt2  # quick check

Measured in one run, over every parameter of the model (tied weights once):

(a) every per-tensor statistic except the spectral norm (``StatsConfig(spectral="none")``), in GB/s
    of parameters, against a plain read (``t.sum()`` per tensor) and a straightforward torch version
    (``torch.histc`` with 256 bins and separate mean/std/min/max/moment/count ops; it computes
    neither ``quant_sensitivity`` nor ``prune_potential``). Target: >= 1 GB/s of float32 on 2 cores.
    Best of ``--rounds``, the three taking turns so that drifting machine load hits all alike.
(b) spectral norms of every weight with >= 2 dims: ours (block Krylov to ``--rtol``) against the
    exact ``torch.linalg.matrix_norm(ord=2)``: both times, the ratio, the largest relative error
    observed and whether every error lies within the bound reported with it.
(c) the whole parameter analysis (``tensor_stats`` with spectral norms, every parameter) against
    WeightWatcher 0.7.7 ``WeightWatcher(model=model).analyze()`` on the same model: both times, the
    ratio (target: ours at most a fifth of WeightWatcher's time) and WeightWatcher's mean alpha.
    Skipped, saying why, when ``weightwatcher`` cannot be imported
    (``pip install weightwatcher==0.7.7``; check first that it leaves torch alone).
"""

from __future__ import annotations

import argparse
import logging
import os
import time

import torch

from modelxray.api import compose
from modelxray.core.instantiate import build_component
from modelxray.metrics.tensor_stats import StatsConfig, spectral_norm, tensor_stats
from modelxray.models import process_cache


def naive_stats(t: torch.Tensor, bins: int = 256, k: float = 3.0, small: float = 1e-3) -> dict:
    """The straightforward version: one torch op per statistic, on the whole tensor."""
    x = t.detach().float()
    mean, std = x.mean(), x.std(correction=0)
    lo, hi = x.min(), x.max()
    d = x - mean
    linf = torch.maximum(-lo, hi)
    return {
        "mean": float(mean),
        "std": float(std),
        "min": float(lo),
        "max": float(hi),
        "skewness": float((d**3).mean() / std**3),
        "kurtosis": float((d**4).mean() / std**4 - 3),
        "hist": torch.histc(x, bins, float(lo), float(hi)).tolist(),
        "abs_mean": float(x.abs().mean()),
        "l2": float(x.norm()),
        "zeros": int((x == 0).sum()),
        "small": int((x.abs() < small * linf).sum()),
        "outliers": int((d.abs() > k * std).sum()),
    }


def timed(fn, tensors) -> float:
    start = time.perf_counter()
    for t in tensors:
        fn(t)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", help="a config of conf/model (default: smollm2)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of (a); the best of each is reported")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--skip-exact", action="store_true", help="skip the slow exact spectral norms of (b)")
    ap.add_argument("--skip-ww", action="store_true", help="skip the WeightWatcher comparison of (c)")
    args = ap.parse_args()

    cfg = compose([f"model={args.model}"])
    source = build_component(cfg.model, "model")
    t = time.perf_counter()
    loaded = process_cache.load_model(source, 1)
    model = loaded.model
    params = list({p.data_ptr(): p.detach() for p in model.parameters()}.values())
    n_bytes = sum(p.numel() * p.element_size() for p in params)
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in params})
    print(
        f"== {args.model}: {len(params)} tensors, {sum(p.numel() for p in params):,} parameters, "
        f"{n_bytes / 1e6:,.1f} MB ({', '.join(dtypes)}), loaded in {time.perf_counter() - t:.1f} s; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs"
    )

    none = StatsConfig(spectral="none")

    def plain(x: torch.Tensor) -> float:
        return float(x.sum())

    def ours(x: torch.Tensor) -> dict:
        return tensor_stats(x, none)

    for fn in (plain, ours, naive_stats):  # warm-up: page the weights in, start the worker threads
        timed(fn, params[:3] + sorted(params, key=lambda x: -x.numel())[:1])
    timed(plain, params)
    best = {"plain read": float("inf"), "tensor_stats": float("inf"), "straightforward": float("inf")}
    order = [("plain read", plain), ("tensor_stats", ours), ("straightforward", naive_stats)]
    for r in range(args.rounds):
        for name, fn in order[r % 3 :] + order[: r % 3]:
            best[name] = min(best[name], timed(fn, params))
    print(f"\n(a) per-tensor statistics without spectral norms, best of {args.rounds} rounds")
    for name, s in best.items():
        print(f"  {name + ':':<18}{s * 1e3:9.1f} ms  {n_bytes / s / 1e9:7.2f} GB/s")
    print(f"  tensor_stats / plain read:      {best['plain read'] / best['tensor_stats']:.3f} of its speed")
    print(
        f"  tensor_stats vs straightforward: {best['straightforward'] / best['tensor_stats']:.2f}x faster "
        f"(target: >= 1 GB/s)"
    )

    mats = [p for p in params if p.dim() >= 2]
    print(f"\n(b) spectral norms of {len(mats)} weights (rtol {args.rtol:g})")
    t = time.perf_counter()
    est = [spectral_norm(p, args.rtol, 300, 0) for p in mats]
    t_ours = time.perf_counter() - t
    iters = [e[2] for e in est]
    print(
        f"  ours (block Krylov):   {t_ours:8.2f} s  (block steps: mean {sum(iters) / len(iters):.1f}, "
        f"max {max(iters)}; largest bound reported {max(e[1] for e in est):.2e})"
    )
    if not args.skip_exact:
        t = time.perf_counter()
        exact = [float(torch.linalg.matrix_norm(p.reshape(p.shape[0], -1).float(), ord=2)) for p in mats]
        t_exact = time.perf_counter() - t
        errs = [(x - e[0]) / x for x, e in zip(exact, est)]
        within = sum(abs(err) <= e[1] for err, e in zip(errs, est))
        print(f"  exact matrix_norm(2):  {t_exact:8.2f} s  -> ours {t_exact / t_ours:.1f}x faster")
        print(
            f"  largest relative error {max(abs(e) for e in errs):.2e}; within the reported bound: {within}/{len(errs)}"
        )

    print("\n(c) whole parameter analysis (tensor_stats with spectral norms) vs WeightWatcher")
    t = time.perf_counter()
    rows = [tensor_stats(p, StatsConfig(spectral_rtol=args.rtol)) for p in params]
    t_ours = time.perf_counter() - t
    print(f"  ours:            {t_ours:8.2f} s  ({len(rows)} tensors)")
    if args.skip_ww:
        print("  WeightWatcher: skipped (--skip-ww)")
        return
    try:
        import weightwatcher as ww
    except Exception as e:  # noqa: BLE001 - any import failure means: skip, and say why
        print(
            f"  WeightWatcher: skipped, cannot import weightwatcher ({type(e).__name__}: {e}); "
            "pip install weightwatcher==0.7.7"
        )
        return
    logging.getLogger("weightwatcher").setLevel(logging.ERROR)
    t = time.perf_counter()
    details = ww.WeightWatcher(model=model).analyze()
    t_ww = time.perf_counter() - t
    alpha = details["alpha"].mean()
    print(f"  WeightWatcher {ww.__version__}: {t_ww:8.2f} s  ({len(details)} layers, mean alpha {alpha:.2f})")
    print(f"  ours / WeightWatcher: {t_ours / t_ww:.3f} of its time, {t_ww / t_ours:.1f}x faster (target: <= 0.2)")


if __name__ == "__main__":
    main()
