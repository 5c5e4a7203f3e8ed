"""Bytes held by a model's tensors, grouped by dtype."""
from __future__ import annotations

from torch import nn


def tensor_bytes_by_dtype(model: nn.Module) -> dict[str, dict[str, int]]:
    """``{"params": {dtype: bytes}, "buffers": {dtype: bytes}}``; shared (tied) tensors count once."""
    out: dict[str, dict[str, int]] = {"params": {}, "buffers": {}}
    seen: set[int] = set()
    for kind, tensors in (("params", model.parameters()), ("buffers", model.buffers())):
        for t in tensors:
            if t.data_ptr() in seen:
                continue
            seen.add(t.data_ptr())
            dtype = str(t.dtype).replace("torch.", "")
            out[kind][dtype] = out[kind].get(dtype, 0) + t.numel() * t.element_size()
    return out


def count_parameters(model: nn.Module) -> int:
    """Number of distinct parameter elements (tied weights once)."""
    return sum(p.numel() for p in {p.data_ptr(): p for p in model.parameters()}.values())
