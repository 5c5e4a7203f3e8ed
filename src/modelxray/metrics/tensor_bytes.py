"""Bytes held by a model's tensors, grouped by dtype."""

from __future__ import annotations

import torch
from torch import nn


def storage_tensors(t: torch.Tensor) -> list[torch.Tensor]:
    """The plain tensors that hold ``t``'s data: itself, or for a quantized tensor subclass
    (torchao's Int8Tensor...) its inner tensors (int8 data, scales), which is what memory holds."""
    if type(t) in (torch.Tensor, nn.Parameter) or not hasattr(t, "__tensor_flatten__"):
        return [t]
    names, _ = t.__tensor_flatten__()
    return [x for n in names for x in storage_tensors(getattr(t, n))]


def storage_key(t: torch.Tensor) -> int:
    """What identifies a tensor's storage, to count shared (tied) tensors once: its data pointer, or
    for a tensor on the meta device (a streamed model's, which has none) the tensor itself."""
    return id(t) if t.device.type == "meta" else t.data_ptr()


def tensor_bytes_by_dtype(model: nn.Module) -> dict[str, dict[str, int]]:
    """``{"params": {dtype: bytes}, "buffers": {dtype: bytes}}`` as stored (quantized tensor
    subclasses by their inner tensors); shared (tied) tensors count once."""
    out: dict[str, dict[str, int]] = {"params": {}, "buffers": {}}
    seen: set[int] = set()
    for kind, tensors in (("params", model.parameters()), ("buffers", model.buffers())):
        for outer in tensors:
            for t in storage_tensors(outer):
                if storage_key(t) in seen:
                    continue
                seen.add(storage_key(t))
                dtype = str(t.dtype).replace("torch.", "")
                out[kind][dtype] = out[kind].get(dtype, 0) + t.numel() * t.element_size()
    return out


def count_parameters(model: nn.Module) -> int:
    """Number of distinct parameter elements (tied weights once)."""
    return sum(p.numel() for p in {storage_key(p): p for p in model.parameters()}.values())
