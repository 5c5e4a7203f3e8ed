"""Per-tensor statistics over a whole model, one tensor at a time, labelled with the layer type
that owns each tensor and the block it sits in. Never copies the model: parameters are read in
place (a half-precision tensor is converted alone), a weights-only file is read tensor by tensor."""

from __future__ import annotations

import re

from torch import nn

from modelxray.core.formatting import type_name
from modelxray.core.progress import bar
from modelxray.metrics.memory_layout import layout
from modelxray.metrics.tensor_stats import StatsConfig, tensor_stats
from modelxray.models.weights_file import WeightsFile, named_tensors
from modelxray.quant.targets import block_of

_EMB = re.compile(r"(embed|wte|wpe|tok_embeddings|word_embeddings|position_embeddings)", re.IGNORECASE)
_NORM = re.compile(r"(norm|ln_\w*|layernorm|\.ln\d*\.)", re.IGNORECASE)


def owner_types(model: nn.Module) -> dict[str, str]:
    """Parameter name -> type name of the module that owns it (tied weights under their first name)."""
    out: dict[str, str] = {}
    seen = set()
    for mname, m in model.named_modules():
        for pname, p in m.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            out[f"{mname}.{pname}" if mname else pname] = type_name(m)
    return out


def type_from_name(name: str, ndim: int) -> str:
    """Layer type of a tensor known only by name and rank (weights-only files)."""
    if _EMB.search(name):
        return "embedding"
    if _NORM.search(name) and ndim == 1:
        return "norm"
    if name.endswith("bias"):
        return "bias"
    if ndim == 2:
        return "linear"
    if ndim >= 3:
        return "conv"
    return "vector"


def analyze_weights(model: nn.Module, cfg: StatsConfig, progress: bool = True) -> list[dict]:
    """One row per tensor: name, type, block, every statistic of ``tensor_stats`` and its memory layout."""
    types = {} if isinstance(model, WeightsFile) else owner_types(model)
    total = len(model.tensor_names()) if isinstance(model, WeightsFile) else len(types)
    rows = []
    for name, t in bar(
        named_tensors(model), total=total, desc="inspect: parameter statistics", unit="tensor", enabled=progress
    ):
        kind = types.get(name) or type_from_name(name, t.dim())
        rows.append({"name": name, "type": kind, "block": block_of(name), **tensor_stats(t, cfg), **tensor_layout(t)})
    return rows


def tensor_layout(t) -> dict:
    """Where the tensor lies: its alignment to a cache line, contiguity and stride pattern
    (``metrics/memory_layout.py``); empty for a tensor without strides or an address (sparse, meta)."""
    try:
        ptr = None if t.device.type == "meta" else t.data_ptr()
        return layout(tuple(t.shape), t.stride(), ptr)
    except (RuntimeError, NotImplementedError, AttributeError, TypeError):
        return {}
