"""Per-layer gradient norms and vanishing/exploding flags, pure functions of a model's ``.grad``.

A "layer" is the module that owns the parameters: ``fc1.weight`` and ``fc1.bias`` form layer
``fc1``; its norm is the L2 norm of all their gradients together. One fused ``torch._foreach_norm``
call and one transfer to the CPU per measurement, so it can run every step.

Flags (thresholds are config): a layer is *vanishing* at a step when its gradient norm is below
``vanishing`` (default 1e-7) and *exploding* when above ``exploding`` (default 1e3). A layer is
flagged in the report when it is vanishing/exploding in at least ``flag_share`` of measured steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


def layer_of(param_name: str) -> str:
    """The owning module's name (``blocks.0.attn.q.weight`` -> ``blocks.0.attn.q``); top-level parameters keep their name."""
    return param_name.rsplit(".", 1)[0] if "." in param_name else param_name


def layer_grad_norms(model: nn.Module) -> dict[str, float]:
    """L2 norm of the gradients of each layer's parameters (layers without gradients are left out)."""
    names, grads = [], []
    for name, p in model.named_parameters():
        if p.grad is not None:
            names.append(layer_of(name))
            grads.append(p.grad.detach())
    if not grads:
        return {}
    try:
        norms = torch.stack(torch._foreach_norm(grads)).float()
    except (AttributeError, RuntimeError):  # very old or exotic tensors
        norms = torch.stack([g.float().norm() for g in grads])
    layers = list(dict.fromkeys(names))
    pos = torch.tensor([layers.index(n) for n in names], device=norms.device)
    sq = torch.zeros(len(layers), device=norms.device).index_add_(0, pos, norms.double().pow(2).float())
    values = sq.sqrt().cpu().tolist()
    return dict(zip(layers, values))


@dataclass
class FlowThresholds:
    vanishing: float = 1e-7
    exploding: float = 1e3
    flag_share: float = 0.5


def flow_flags(norms: np.ndarray, thresholds: FlowThresholds | None = None) -> dict[str, np.ndarray]:
    """Per layer (rows of ``norms`` (layers, steps), NaN = not measured): share of steps vanishing and
    exploding, and whether the layer is flagged."""
    t = thresholds or FlowThresholds()
    norms = np.asarray(norms, np.float64)
    measured = ~np.isnan(norms)
    n = np.maximum(measured.sum(axis=1), 1)
    van = (measured & (np.nan_to_num(norms, nan=np.inf) < t.vanishing)).sum(axis=1) / n
    exp = (measured & (np.nan_to_num(norms, nan=-np.inf) > t.exploding)).sum(axis=1) / n
    return {
        "vanishing_share": van,
        "exploding_share": exp,
        "vanishing": van >= t.flag_share,
        "exploding": exp >= t.flag_share,
    }
