"""Measured time per aten op with torch.profiler.

FLOPs and bytes (``measure/flops.py``) say what an op must do; this says how long it took, so the
roofline can put the two together. Times are *self* times (an op's own time minus its children's), so
composite ops such as ``aten.linear`` do not count their ``aten.addmm`` twice. Op names are normalized
from the profiler's "aten::mm" to the "aten.mm" form that ``flops.py`` uses.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from modelxray.measure.flops import eval_mode, run_model
from modelxray.measure.scoring import model_device


@dataclass
class OpTime:
    op: str
    calls: int
    cpu_time_s: float
    device_time_s: float  # 0 on CPU


def op_name(profiler_name: str) -> str:
    """ "aten::mm" -> "aten.mm" (the ``str()`` of an aten overload packet)."""
    return profiler_name.replace("::", ".", 1)


def profile_ops(model: nn.Module, inputs, *, warmup: int = 2, iters: int = 5) -> tuple[list[OpTime], float]:
    """Per aten op, self time and calls per forward (mean over ``iters`` profiled runs), slowest first;
    and the median wall time of one forward, timed without the profiler (it adds per-op overhead)."""
    device = model_device(model)
    on_cuda = device.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(device)) if on_cuda else (lambda: None)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    iters = max(1, iters)
    with eval_mode(model), torch.inference_mode():
        for _ in range(warmup):
            run_model(model, inputs)
        sync()
        walls = []
        for _ in range(iters):
            start = time.perf_counter()
            run_model(model, inputs)
            sync()
            walls.append(time.perf_counter() - start)
        with profile(activities=activities) as prof:
            for _ in range(iters):
                run_model(model, inputs)
            sync()
    rows = []
    for e in prof.key_averages():
        if not e.key.startswith("aten::"):
            continue
        dev = float(getattr(e, "self_device_time_total", 0.0) or 0.0) if on_cuda else 0.0
        rows.append(
            OpTime(
                op=op_name(e.key),
                calls=round(e.count / iters),
                cpu_time_s=e.self_cpu_time_total / 1e6 / iters,
                device_time_s=dev / 1e6 / iters,
            )
        )
    rows.sort(key=lambda t: (-t.device_time_s, -t.cpu_time_s, t.op))
    return rows, statistics.median(walls)  # the median: robust to a busy machine's stragglers
