"""The machine's measured ceilings, for a roofline: matmul FLOP/s and copy bandwidth.

Vendor peaks are rarely reached by PyTorch on a given machine and dtype; an op is judged against what a
large square matmul and a large copy achieve here, now, with the same threads and library.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from modelxray.measure.flops import OpTraffic
from modelxray.measure.op_profile import OpTime

# the matmul shrinks until ``iters`` runs fit this budget (seconds), so slow dtypes/CPUs stay quick
_MATMUL_BUDGET_S = 2.5


@dataclass
class Peak:
    matmul_flops_per_s: float
    memory_bytes_per_s: float
    device: str
    dtype: str
    matmul_size: int

    @property
    def ridge_intensity(self) -> float:
        """FLOPs per byte where the memory roof (intensity * bandwidth) meets the compute roof."""
        return self.matmul_flops_per_s / self.memory_bytes_per_s if self.memory_bytes_per_s else float("inf")


def _timer(device: torch.device):
    if device.type == "cuda":
        return lambda: (torch.cuda.synchronize(device), time.perf_counter())[1]
    return time.perf_counter


def _best(fn, iters: int, now) -> float:
    best = float("inf")
    for _ in range(iters):
        start = now()
        fn()
        best = min(best, now() - start)
    return best


def _matmul(device: torch.device, dtype: torch.dtype, n: int):
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)
    return lambda: torch.mm(a, b, out=c)


def measure_peak(
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    size: int = 2048,
    iters: int = 5,
    copy_mb: int = 256,
) -> Peak:
    """Best-of-``iters`` square matmul FLOP/s (2*n^3 per matmul; ``size``, or ``size`` halved as often as the
    runs need to fit ~2.5 s on a slow device or dtype) and copy bandwidth (bytes read + written per second)
    of a ``copy_mb`` MiB tensor.
    Non-float dtypes (quantized weights) are measured as float32."""
    dev = torch.device(device)
    if not dtype.is_floating_point:
        dtype = torch.float32
    now = _timer(dev)
    iters = max(1, iters)
    with torch.inference_mode():
        sizes = [size]
        while sizes[-1] // 2 >= 256:
            sizes.append(sizes[-1] // 2)
        sizes.reverse()  # ..., size // 2, size: grow while 8x the last time still fits the budget
        n, run = sizes[0], _matmul(dev, dtype, sizes[0])
        first = _best(run, 2, now)  # includes the warm-up
        for m in sizes[1:]:
            if first * 8 * (iters + 1) > _MATMUL_BUDGET_S:
                break
            n, run = m, _matmul(dev, dtype, m)
            first = _best(run, 1, now)
        mm_s = min(first, _best(run, iters, now))
        del run
        numel = max(1, copy_mb * 2**20)
        src = torch.ones(numel, device=dev, dtype=torch.uint8)
        dst = torch.empty_like(src)
        dst.copy_(src)
        copy_s = _best(lambda: dst.copy_(src), iters, now)
    return Peak(
        matmul_flops_per_s=2 * n**3 / mm_s,
        memory_bytes_per_s=2 * numel / copy_s,
        device=str(dev),
        dtype=str(dtype).replace("torch.", ""),
        matmul_size=n,
    )


def in_cache(bytes_per_s: float, peak: Peak) -> bool:
    """Whether an op moving ``bytes_per_s`` beat the measured copy bandwidth (its data sat in cache)."""
    return bool(peak.memory_bytes_per_s) and bytes_per_s > peak.memory_bytes_per_s


def roofline(ops: list[OpTraffic], times: list[OpTime], peak: Peak) -> list[dict]:
    """Per op that moved bytes or did FLOPs and was timed: intensity, achieved FLOP/s, the attainable
    min(peak FLOP/s, intensity * bandwidth), share of it achieved, and which roof binds ("memory" below the
    ridge). The share is max(flops/peak, bytes/bandwidth) / time, which also rates zero-FLOP ops. Slowest first.

    ``in_cache`` marks an op that moved its bytes faster than the measured copy bandwidth: the
    bandwidth is that of a tensor far larger than the caches, so such an op's data sat in cache and
    its share of the memory roof exceeds 1 without any error in the measurement."""
    timed = {t.op: t for t in times}
    ridge = peak.ridge_intensity
    rows = []
    for o in ops:
        moved = o.bytes_read + o.bytes_written
        t = timed.get(o.op)
        secs = (t.device_time_s or t.cpu_time_s) if t is not None else 0.0
        if not (o.flops or moved) or secs <= 0:
            continue
        ideal = max(o.flops / peak.matmul_flops_per_s, moved / peak.memory_bytes_per_s)
        rows.append(
            {
                "op": o.op,
                "calls": o.calls,
                "flops": o.flops,
                "bytes": moved,
                "intensity": o.intensity,
                "time_s": secs,
                "achieved_flops_per_s": o.flops / secs,
                "achieved_bytes_per_s": moved / secs,
                "attainable_flops_per_s": min(peak.matmul_flops_per_s, o.intensity * peak.memory_bytes_per_s),
                "share_of_attainable": ideal / secs,
                "in_cache": in_cache(moved / secs, peak),
                "bound": "memory" if o.intensity < ridge else "compute",
                "ridge": ridge,
            }
        )
    rows.sort(key=lambda r: -r["time_s"])
    return rows
