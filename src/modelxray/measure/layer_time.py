"""Per-module forward time with hooks.

torch.profiler reports per-op times; users ask per *module* ("which block is slow?"), so forward
pre/post hooks time every named module. Times are inclusive (a block includes its children);
``self_ms`` subtracts the time of the nearest descendants that ran: containers such as
``nn.ModuleList`` never run a forward of their own, so a decoder's blocks count against the
decoder that calls them, and the self times add up to the timed modules' total. Modules rank by
self time: by inclusive time every container outranks its children, and the slowest modules
would be the model, its decoder and its blocks, whatever they spend their time on.
"""

from __future__ import annotations

import time
from collections import defaultdict

import torch
from torch import nn

from modelxray.measure.scoring import device_of, forward_logits


def time_modules(model: nn.Module, input_ids: torch.Tensor | dict, iters: int = 1) -> list[dict]:
    """Mean inclusive and self time per module over ``iters`` forward passes, largest self time first."""
    named = [(name, m) for name, m in model.named_modules() if name]
    leaf = {name: not any(True for _ in m.children()) for name, m in named}
    totals: dict[str, float] = defaultdict(float)
    starts: dict[str, list[float]] = defaultdict(list)
    sync = (
        (lambda: torch.cuda.synchronize(device_of(input_ids)))
        if device_of(input_ids).type == "cuda"
        else (lambda: None)
    )
    handles = []

    def pre(name):
        def hook(_module, _args):
            sync()
            starts[name].append(time.perf_counter())

        return hook

    def post(name):
        def hook(_module, _args, _out):
            sync()
            totals[name] += time.perf_counter() - starts[name].pop()

        return hook

    for name, module in named:
        handles.append(module.register_forward_pre_hook(pre(name)))
        handles.append(module.register_forward_hook(post(name)))
    try:
        with torch.inference_mode():
            for _ in range(iters):
                forward_logits(model, input_ids)
    finally:
        for h in handles:
            h.remove()
    inner: dict[str, float] = defaultdict(float)  # time of the nearest timed descendants
    for name in totals:
        parent = name
        while "." in parent:
            parent = parent.rpartition(".")[0]
            if parent in totals:
                inner[parent] += totals[name]
                break
    rows = []
    types = dict((name, type(m).__name__) for name, m in named)
    for name, _ in named:
        if name not in totals:
            continue
        incl = totals[name] / iters * 1e3
        rows.append(
            {
                "module": name,
                "type": types[name],
                "time_ms": incl,
                "self_ms": max(incl - inner[name] / iters * 1e3, 0.0),
                "leaf": leaf[name],
            }
        )
    rows.sort(key=lambda r: (r["self_ms"], r["time_ms"]), reverse=True)
    return rows


def time_by_type(rows: list[dict]) -> dict[str, float]:
    """Self time per module type (ms), summed over all modules: where the forward pass spends its time."""
    out: dict[str, float] = defaultdict(float)
    for r in rows:
        out[r["type"]] += r["self_ms"]
    return dict(sorted(out.items(), key=lambda kv: kv[1], reverse=True))
