"""How a tensor lies in memory and where an op's data fits, from numbers alone (shapes, strides,
addresses, byte counts, cache sizes): no tensor is touched, so the same functions serve a model
in memory, a memory-mapped file and a test.

- alignment: a tensor whose first byte is not on a 64-byte cache-line boundary makes every vector
  load of its rows straddle two lines;
- stride pattern: ``contiguous`` (row-major), ``transposed`` (the last two dimensions swapped, as
  ``W.t()`` gives), ``channels_last`` (NHWC), ``broadcast`` (a stride of 0: one value read for
  many), ``strided`` (gaps between rows: a slice);
- cache level: the smallest cache an op's working set (the bytes it reads and writes in one call)
  fits, against the sizes the CPU reports;
- a file against the memory a run may use: TorchScript loads whole, so a file larger than that
  memory cannot be loaded at all."""

from __future__ import annotations

import math

from modelxray.core.formatting import human_bytes

CACHE_LINE = 64  # bytes: the cache line of x86-64 and of most Arm cores
LEVELS = ("L1d", "L2", "L3")  # data caches, smallest first


def _row_major(shape: tuple[int, ...]) -> list[int]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return strides[::-1]


def _matches(shape, stride, expected) -> bool:
    """Strides equal where they matter: a dimension of size 1 may have any stride."""
    return all(size == 1 or s == e for size, s, e in zip(shape, stride, expected))


def stride_pattern(shape, stride) -> str:
    """``contiguous``, ``transposed``, ``channels_last``, ``broadcast`` or ``strided`` (see the module
    docstring): the first that describes the tensor."""
    shape, stride = tuple(int(d) for d in shape), tuple(int(s) for s in stride)
    if _matches(shape, stride, _row_major(shape)):
        return "contiguous"
    if any(s == 0 and size > 1 for size, s in zip(shape, stride)):
        return "broadcast"
    if len(shape) >= 2:
        swapped = shape[:-2] + (shape[-1], shape[-2])
        expected = _row_major(swapped)
        expected[-1], expected[-2] = expected[-2], expected[-1]
        if _matches(shape, stride, expected):
            return "transposed"
    if len(shape) == 4:
        n, c, h, w = shape
        if _matches(shape, stride, [h * w * c, 1, w * c, c]):
            return "channels_last"
    return "strided"


def layout(shape, stride, data_ptr: int | None) -> dict:
    """``align_offset`` (address modulo the cache line; 0 = aligned, None without an address),
    ``contiguous`` and ``stride_pattern`` of one tensor."""
    pattern = stride_pattern(shape, stride)
    return {
        "align_offset": None if data_ptr is None else int(data_ptr) % CACHE_LINE,
        "contiguous": pattern == "contiguous",
        "stride_pattern": pattern,
        "strides": str(list(stride)),
    }


def cache_level(working_set: float, caches: dict[str, int]) -> str:
    """The smallest data cache (``L1d``, ``L2``, ``L3``) that holds ``working_set`` bytes, else
    ``memory``; ``unknown`` without any cache size."""
    known = [(name, caches[name]) for name in LEVELS if caches.get(name)]
    if not known:
        return "unknown"
    return next((name for name, size in known if working_set <= size), "memory")


def locality_candidates(nodes: list[dict], caches: dict[str, int], ridge: float) -> list[dict]:
    """The nodes whose data cannot stay in L2 and that do too little work per byte to hide it: a
    working set (bytes read and written per call) larger than L2 and an intensity below the ridge
    point (``ridge`` FLOP/byte, where the measured memory and compute roofs meet). Slowest first.
    None without an L2 size or a finite ridge: the numbers would not support the advice."""
    l2 = caches.get("L2")
    if not l2 or not math.isfinite(ridge):
        return []
    out = [
        n
        for n in nodes
        if n.get("working_set_bytes", 0) > l2 and n.get("intensity", 0.0) < ridge and n.get("bytes", 0) > 0
    ]
    return sorted(out, key=lambda n: -(n.get("time_s") or 0.0))


def fits_in_memory(file_bytes: int, available_bytes: int) -> bool:
    """Whether a file that loads whole (TorchScript) fits the memory the run may use."""
    return file_bytes <= available_bytes


def torchscript_too_large(file_bytes: int, available_bytes: int, where: str) -> str | None:
    """The one line that refuses a TorchScript file larger than the memory the run may use, before
    loading it (``torch.jit.load`` reads every tensor into memory): None when it fits. ``where`` says
    where the limit comes from (``runtime.max_memory``, or the memory available less the headroom)."""
    if fits_in_memory(file_bytes, available_bytes):
        return None
    return (
        f"the TorchScript file ({human_bytes(file_bytes)}) is larger than the memory this run may use "
        f"({human_bytes(available_bytes)}: {where}), and TorchScript loads whole; save its state dict "
        "(safetensors or torch.save) and give model.architecture instead: a state dict is memory-mapped"
    )
