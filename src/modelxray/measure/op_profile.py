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
from torch.utils._python_dispatch import TorchDispatchMode

from modelxray.measure.flops import eval_mode, layer_pattern, run_model
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


def profile_nodes(model: nn.Module, inputs, *, iters: int = 2) -> list[dict]:
    """The profiler's time per aten op *and input shapes* (a node of the forward, the same for a
    TorchScript file and an eager model): calls, self time, and time with the ops it calls, per
    forward. ``node_table`` joins it with the traced forward's exact FLOPs and bytes."""
    iters = max(1, iters)
    with eval_mode(model), torch.inference_mode():
        run_model(model, inputs)  # warm-up
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for _ in range(iters):
                run_model(model, inputs)
    rows = []
    for e in prof.key_averages(group_by_input_shape=True):
        if not e.key.startswith("aten::") or e.cpu_time_total <= 0:
            continue
        shapes = [s for s in (e.input_shapes or []) if isinstance(s, (list, tuple)) and s]
        rows.append(
            {
                "op": op_name(e.key),
                "input_shapes": " ".join("x".join(map(str, s)) for s in shapes),
                "calls": round(e.count / iters),
                "time_s": e.self_cpu_time_total / 1e6 / iters,
                "total_time_s": e.cpu_time_total / 1e6 / iters,  # with the ops it calls
            }
        )
    rows.sort(key=lambda r: (-r["time_s"], r["op"]))
    return rows


def node_table(records: list, timed: list[dict]) -> list[dict]:
    """The forward's nodes: each (op, input shapes) of one traced forward (``flops.trace_ops``, whose
    FLOPs and bytes are exact for every op, convolutions included) with its calls, module, FLOPs,
    bytes moved and FLOPs per byte, and the profiler's time of the same op on the same shapes
    (``profile_nodes``: with the ops it calls; None where the profiler saw no such node). Views move
    nothing and are left out. Slowest first, then most FLOPs."""
    times = {(r["op"], r["input_shapes"]): r["total_time_s"] for r in timed}
    nodes: dict[tuple[str, str], dict] = {}
    for rec in records:
        if rec.is_view:
            continue
        row = nodes.setdefault(
            (rec.op, rec.shapes),
            {"op": rec.op, "module": rec.module, "input_shapes": rec.shapes, "calls": 0, "flops": 0, "bytes": 0},
        )
        row["calls"] += 1
        if rec.module != row["module"]:  # the same op on the same shapes in each repeated block
            same = layer_pattern(rec.module) == layer_pattern(row["module"])
            row["module"] = layer_pattern(row["module"]) if same else "(several modules)"
        row["flops"] += rec.flops
        row["bytes"] += rec.bytes_read + rec.bytes_written
    out = []
    for (op, shapes), row in nodes.items():
        row["intensity"] = row["flops"] / row["bytes"] if row["bytes"] else 0.0
        row["time_s"] = times.get((op, shapes))
        out.append(row)
    out.sort(key=lambda r: (-(r["time_s"] or 0.0), -r["flops"], r["op"]))
    return out


class _Counted(TorchDispatchMode):
    """Reads an energy counter (``read``: joules so far) and the clock around every aten op."""

    def __init__(self, read) -> None:
        super().__init__()
        self.read = read
        self.rows: dict[str, list[float]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        t0, e0 = time.perf_counter(), self.read()
        out = func(*args, **(kwargs or {}))
        e1, t1 = self.read(), time.perf_counter()
        row = self.rows.setdefault(str(func._overloadpacket), [0, 0.0, 0.0])
        row[0] += 1
        row[1] += e1 - e0
        row[2] += t1 - t0
        return out


def energy_by_op(model: nn.Module, inputs, read, *, seconds: float = 1.0) -> tuple[list[dict], dict]:
    """Energy per aten op group, from a counter read just before and just after each op (RAPL: the
    whole package, updated about every millisecond, so short ops get it as a sample and forwards are
    repeated for ``seconds``). Per forward: each op's calls, energy and time (counters and clock read
    inside the op window), most energy first; and the forward's total energy and time, whose rest is
    spent between ops (Python, the reads themselves)."""
    with eval_mode(model), torch.no_grad():
        run_model(model, inputs)  # warm-up
        mode, n = _Counted(read), 0
        e0, t0 = read(), time.perf_counter()
        while n == 0 or time.perf_counter() - t0 < seconds:
            with mode:
                run_model(model, inputs)
            n += 1
        total_j, total_s = read() - e0, time.perf_counter() - t0
    rows = [
        {"op": op, "calls": round(calls / n), "energy_j": e / n, "time_s": s / n}
        for op, (calls, e, s) in mode.rows.items()
    ]
    rows.sort(key=lambda r: (-r["energy_j"], -r["time_s"], r["op"]))
    return rows, {"forwards": n, "energy_j": total_j / n, "time_s": total_s / n}
