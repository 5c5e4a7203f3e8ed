"""How far one tensor is from another of the same name: the model's weight against its reference's
(a quantized file against its float source, a fine-tune against its base)."""

from __future__ import annotations

import torch


def tensor_difference(weight: torch.Tensor, reference: torch.Tensor) -> dict[str, float]:
    """``rel_diff`` ||w - r|| / ||r||, ``max_abs_diff``, ``cosine`` of the flattened tensors and
    ``changed_share``, the share of elements that differ; in float64."""
    w, r = weight.detach().double().reshape(-1), reference.detach().double().reshape(-1)
    diff = w - r
    ref_norm, w_norm = float(r.norm()), float(w.norm())
    return {
        "rel_diff": float(diff.norm()) / ref_norm if ref_norm else float(diff.norm()),
        "max_abs_diff": float(diff.abs().max()) if diff.numel() else 0.0,
        "cosine": float(w @ r) / (w_norm * ref_norm) if w_norm and ref_norm else float(w_norm == ref_norm),
        "changed_share": float((diff != 0).double().mean()) if diff.numel() else 0.0,
    }
