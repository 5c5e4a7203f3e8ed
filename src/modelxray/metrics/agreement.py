"""How far a model's outputs moved from a reference's on the same inputs (pure functions).

The quality of a generic model (no labels) after quantization: per output tensor, the cosine
similarity of each example's output with the reference's (mean and its standard error over
examples; left out when an example's output is one value, where it only says whether the sign
held), the relative L2 error ||out - ref|| / ||ref|| over the whole tensor, the largest absolute
difference, and, for outputs that score classes (named like ``logits`` or ``scores``, or named by
the caller), the share of positions whose arg-max agrees: an arg-max of a regression output or of
hidden states means nothing.
"""

from __future__ import annotations

import math
import re
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


SCORES = re.compile(r"logit|score|prob", re.IGNORECASE)  # output names that hold class scores


def agreement(reference: torch.Tensor, output: torch.Tensor, scores: bool = False) -> dict[str, float]:
    """``cosine`` (mean over examples, the first dimension; not for one value per example),
    ``cosine_se``, ``rel_error``, ``max_abs_error``, ``examples`` and, when ``scores`` (the last
    dimension scores classes), ``top1_agree`` over every position."""
    if reference.shape != output.shape:
        raise ValueError(f"output shape {tuple(output.shape)} differs from the reference's {tuple(reference.shape)}")
    ref, out = reference.detach().double().cpu(), output.detach().double().cpu()
    rows_ref = ref.reshape(ref.shape[0], -1) if ref.dim() > 1 else ref.reshape(1, -1)
    rows_out = out.reshape(rows_ref.shape)
    n = int(rows_ref.shape[0])
    norm = float(ref.norm())
    result = {
        "rel_error": float((out - ref).norm()) / norm if norm > 0 else float((out - ref).norm()),
        "max_abs_error": float((out - ref).abs().max()) if ref.numel() else 0.0,
        "examples": float(n),
    }
    if rows_ref.shape[1] > 1:  # one value per example: its cosine is 1 whenever the sign held
        cos = torch.nn.functional.cosine_similarity(rows_out, rows_ref, dim=1, eps=1e-30)
        result["cosine"] = float(cos.mean())
        result["cosine_se"] = float(cos.std(unbiased=True) / math.sqrt(n)) if n > 1 else float("nan")
    if scores and ref.dim() >= 2 and ref.shape[-1] >= 2:
        result["top1_agree"] = float((out.argmax(-1) == ref.argmax(-1)).double().mean())
    return result


def output_agreement(reference: Any, output: Any, score_outputs: tuple[str, ...] = ()) -> dict[str, dict[str, float]]:
    """``agreement`` for every floating output tensor present in both, by output name; top-1 agreement
    for those named like class scores (``SCORES``) or listed in ``score_outputs``."""
    refs, outs = output_tensors(reference), output_tensors(output)
    return {
        name: agreement(refs[name], outs[name], bool(SCORES.search(name)) or name in score_outputs)
        for name in refs
        if name in outs
    }


def outside_agreement_bounds(row: dict, agreement_floor: float, kl_ceiling: float) -> list[str]:
    """The agreement bounds ``row`` (with ``top1_agree`` and ``kl`` against a baseline, either may be
    missing) breaks, in words: top-1 agreement below ``agreement_floor``, KL above ``kl_ceiling``.
    Accuracy or perplexity alone can hold while the predictions move."""
    out = []
    agree, kl = row.get("top1_agree", math.nan), row.get("kl", math.nan)
    if isinstance(agree, (int, float)) and math.isfinite(agree) and agree < agreement_floor:
        out.append(f"top-1 agreement {agree:.3f} below the floor {agreement_floor:g}")
    if isinstance(kl, (int, float)) and math.isfinite(kl) and kl > kl_ceiling:
        out.append(f"KL {kl:.3g} above the ceiling {kl_ceiling:g}")
    return out
