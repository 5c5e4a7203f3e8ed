"""How far a model's outputs moved from a reference's on the same inputs (pure functions).

The quality of a generic model (no labels) after quantization: per output tensor, the cosine
similarity of each example's output with the reference's (mean and its standard error over
examples), the relative L2 error ||out - ref|| / ||ref|| over the whole tensor, the largest
absolute difference, and, for outputs shaped like scores (a last dimension of at least two), the
share of positions whose arg-max agrees.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def output_tensors(output: Any, prefix: str = "output") -> dict[str, torch.Tensor]:
    """The floating tensors of a model output, by name: a tensor is ``output``; a tuple's items
    ``output.0``...; a dict's or a ModelOutput's entries by key (``logits``...)."""
    if isinstance(output, torch.Tensor):
        return {prefix: output} if output.is_floating_point() else {}
    if isinstance(output, dict) or hasattr(output, "items"):
        items = list(output.items())
        return {k: v for key, item in items for k, v in output_tensors(item, str(key)).items()}
    if isinstance(output, (tuple, list)):
        out = {}
        for i, item in enumerate(output):
            out.update(output_tensors(item, f"{prefix}.{i}"))
        return out
    return {}


def agreement(reference: torch.Tensor, output: torch.Tensor) -> dict[str, float]:
    """``cosine`` (mean over examples, the first dimension), ``cosine_se``, ``rel_error``,
    ``max_abs_error``, ``examples`` and, for score-like outputs, ``top1_agree`` over every position."""
    if reference.shape != output.shape:
        raise ValueError(f"output shape {tuple(output.shape)} differs from the reference's {tuple(reference.shape)}")
    ref, out = reference.detach().double().cpu(), output.detach().double().cpu()
    rows_ref = ref.reshape(ref.shape[0], -1) if ref.dim() > 1 else ref.reshape(1, -1)
    rows_out = out.reshape(rows_ref.shape)
    cos = torch.nn.functional.cosine_similarity(rows_out, rows_ref, dim=1, eps=1e-30)
    n = int(cos.numel())
    norm = float(ref.norm())
    result = {
        "cosine": float(cos.mean()),
        "cosine_se": float(cos.std(unbiased=True) / math.sqrt(n)) if n > 1 else float("nan"),
        "rel_error": float((out - ref).norm()) / norm if norm > 0 else float((out - ref).norm()),
        "max_abs_error": float((out - ref).abs().max()) if ref.numel() else 0.0,
        "examples": float(n),
    }
    if ref.dim() >= 2 and ref.shape[-1] >= 2:
        result["top1_agree"] = float((out.argmax(-1) == ref.argmax(-1)).double().mean())
    return result


def output_agreement(reference: Any, output: Any) -> dict[str, dict[str, float]]:
    """``agreement`` for every floating output tensor present in both, by output name."""
    refs, outs = output_tensors(reference), output_tensors(output)
    return {name: agreement(refs[name], outs[name]) for name in refs if name in outs}
