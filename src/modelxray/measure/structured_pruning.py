"""Structured pruning potential, measured: for the largest weight layers, the share of whole output
units (a Linear's neurons, a convolution's channels) with the smallest L2 norm is removed (zeroed,
with their biases) and the model is run again; the relative change of its output says what that
removal costs. Then every probed layer at once. Unlike the unstructured estimate (weights that hold
little energy), these are units a smaller dense model could drop, and the cost is the model's own.

The ranking by norm is the usual first criterion (L2 filter pruning); the measured change is what
tells whether it holds for this model.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from modelxray.core.formatting import type_name
from modelxray.metrics.agreement import output_tensors

PRUNABLE = {"Linear": 0, "Conv1d": 0, "Conv2d": 0, "Conv3d": 0, "Conv1D": 1}  # type -> the weight's output dim


def _first_output(out) -> torch.Tensor:
    tensors = output_tensors(out)
    if not tensors:
        raise ValueError("the model's output holds no floating tensor to compare")
    return next(iter(tensors.values())).detach().float()


def _weakest(module: nn.Module, share: float) -> tuple[torch.Tensor, int, int]:
    """(indices of the weakest output units, units, weights per unit) of ``module``."""
    w = module.weight.detach()
    dim = PRUNABLE[type_name(module)]
    units = w.shape[dim]
    norms = w.float().transpose(0, dim).reshape(units, -1).norm(dim=1)
    k = max(1, int(round(share * units)))
    return torch.argsort(norms)[:k], units, w.numel() // units


def _zero(module: nn.Module, idx: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Zero the units ``idx`` of ``module`` in place; the (tensor, saved copy) pairs to restore."""
    dim = PRUNABLE[type_name(module)]
    saved = [(module.weight, module.weight.detach().clone())]
    with torch.no_grad():
        module.weight.index_fill_(dim, idx.to(module.weight.device), 0.0)
        bias = getattr(module, "bias", None)
        if isinstance(bias, torch.Tensor):
            saved.append((bias, bias.detach().clone()))
            bias.index_fill_(0, idx.to(bias.device), 0.0)
    return saved


def _restore(saved: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    with torch.no_grad():
        for tensor, copy in saved:
            tensor.copy_(copy)


def structured_pruning(
    model: nn.Module, run: Callable[[], object], share: float, max_layers: int
) -> tuple[list[dict], float | None]:
    """Rows per probed layer (``layer``, ``unit``, ``units``, ``removed``, ``params_removed``,
    ``output_change``: ||y' - y|| / ||y|| of the first output) and the change with every probed layer
    pruned at once. The model's weights are restored exactly after each trial."""
    layers = [
        (name, m) for name, m in model.named_modules()
        if type_name(m) in PRUNABLE and isinstance(getattr(m, "weight", None), torch.Tensor) and m.weight.dim() >= 2
    ]  # fmt: skip
    if not layers:
        return [], None
    with torch.inference_mode(False), torch.no_grad():
        base = _first_output(run())
        norm = float(base.norm()) or 1.0
        # the head that writes the output (an LM's vocabulary, a classifier's classes) has no units to drop
        heads = {n for n, m in layers if m.weight.shape[PRUNABLE[type_name(m)]] == base.shape[-1]}
        layers = sorted((nm for nm in layers if nm[0] not in heads), key=lambda nm: -nm[1].weight.numel())[:max_layers]
        rows, chosen = [], []
        for name, module in layers:
            idx, units, per_unit = _weakest(module, share)
            saved = _zero(module, idx)
            try:
                change = float((_first_output(run()) - base).norm()) / norm
            finally:
                _restore(saved)
            chosen.append((module, idx))
            unit = "channel" if type_name(module).startswith("Conv") and type_name(module) != "Conv1D" else "neuron"
            rows.append(
                {
                    "layer": name,
                    "unit": unit,
                    "units": units,
                    "removed": int(idx.numel()),
                    "params_removed": int(idx.numel()) * per_unit,
                    "output_change": change,
                }  # fmt: skip
            )
        saved = [pair for module, idx in chosen for pair in _zero(module, idx)]
        try:
            together = float((_first_output(run()) - base).norm()) / norm if chosen else None
        finally:
            _restore(saved)
    return sorted(rows, key=lambda r: r["output_change"]), together
