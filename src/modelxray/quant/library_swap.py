"""Quantizing through another library's modules (torchao, optimum-quanto, HQQ): the chosen Linear
layers of a copy are handed to the library, which swaps or rewrites them, and each is reported as
the library stores it (its packed bytes, read from the tensors it holds) with the relative error of
the library's own dequantized weight against the original."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from modelxray.quant.library_backend import chosen_experts, chosen_linears
from modelxray.quant.rtn import relative_error
from modelxray.quant.summary import layer_row, quant_result
from modelxray.quant.targets import find_targets

if TYPE_CHECKING:
    from torch import nn

    from modelxray.core.result import Result


def conv1d_to_linear(model: torch.nn.Module, names: set[str]) -> None:
    """Swap GPT-2's Conv1D (weight stored in x out) for the equivalent nn.Linear, which torchao handles."""
    for name in names:
        module = model.get_submodule(name)
        if isinstance(module, torch.nn.Linear):
            continue
        w = module.weight.detach()
        linear = torch.nn.Linear(w.shape[0], w.shape[1], bias=module.bias is not None, dtype=w.dtype, device=w.device)
        with torch.no_grad():
            linear.weight.copy_(w.t())
            if module.bias is not None:
                linear.bias.copy_(module.bias)
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, linear)


@dataclass
class SwapParts:
    """What ``quantize_linears`` needs of a library: ``swap(model, names)`` replaces the named Linear
    layers with the library's modules; ``dequantized(module)`` is a swapped module's weight as the
    library computes with it; ``stored_bytes(module)`` what it stores; ``fmt`` and ``bits`` name the
    format in the report; ``notes`` say what the figures are. ``tensor(w)``, where the library
    quantizes a bare tensor: its dequantized values of the (out, in) matrix ``w`` and the bytes it
    stores for them, for the experts of fused mixture-of-experts tensors (None: they stay float)."""

    swap: Callable[[nn.Module, set[str]], None]
    dequantized: Callable[[nn.Module], torch.Tensor]
    stored_bytes: Callable[[nn.Module], int]
    fmt: str
    bits: int
    notes: list[str] = field(default_factory=list)
    tensor: Callable[[torch.Tensor], tuple[torch.Tensor, int]] | None = None


def quantize_linears(
    quantizer,
    model: nn.Module,
    swap: Callable[[nn.Module, set[str]], None],
    dequantized: Callable[[nn.Module], torch.Tensor],
    stored_bytes: Callable[[nn.Module], int],
    fmt: str,
    bits: int,
    notes: list[str],
    tensor: Callable[[torch.Tensor], tuple[torch.Tensor, int]] | None = None,
) -> tuple[nn.Module, Result]:
    """A copy of ``model`` whose chosen Linear layers ``swap(copy, names)`` quantized through a
    library, and the report: per layer the library's stored bytes and the relative error of its
    ``dequantized`` weight (sizes of the original model). The experts of fused mixture-of-experts
    tensors go through the library's ``tensor`` quantizer (``SwapParts.tensor``)."""
    start = time.perf_counter()
    original, model = model, copy.deepcopy(model)
    targets = {t.name: t for t in find_targets(model)}
    chosen = chosen_linears(list(targets.values()), quantizer.skip)
    conv1d_to_linear(model, chosen)
    originals = {n: m.weight.detach().clone() for n, m in model.named_modules() if n in chosen}
    swap(model, chosen)
    rows = []
    for name, module in model.named_modules():
        if name not in chosen:
            continue
        orig = originals[name]
        error = relative_error(orig, dequantized(module).to(orig.dtype))
        rows.append(layer_row(name, orig, bits, fmt, stored_bytes(module), error, targets[name]))
    experts = chosen_experts(list(targets.values()), quantizer.skip)
    if experts:
        notes = [*notes, _experts_note(len(experts), tensor is not None)]
        rows += _quantize_experts(experts, tensor, bits, fmt) if tensor is not None else []
    result = quant_result(fmt, rows, original, time.perf_counter() - start, notes, source=quantizer)
    return model, result


def _quantize_experts(experts: list, tensor: Callable, bits: int, fmt: str) -> list[dict]:
    """Each expert's (out, in) matrix through the library's ``tensor`` quantizer, written back as the
    library dequantizes it: one row each, with the bytes the library stores for it."""
    rows = []
    for t in experts:
        orig = t.weight_matrix().detach().clone()
        values, stored = tensor(orig)
        values = values.reshape(orig.shape).to(orig.dtype)
        t.set_weight_matrix(values)
        rows.append(layer_row(t.name, orig, bits, f"{fmt} (fused experts)", stored, relative_error(orig, values), t))
    return rows


def _experts_note(n: int, quantized: bool) -> str:
    if quantized:
        return (
            f"{n} experts of fused mixture-of-experts tensors: each quantized by the library's own tensor quantizer "
            "with its own groups and run dequantized (the library has no module for one slice of a 3-D tensor); "
            "their sizes are what the library stores."
        )
    return (
        f"{n} experts of fused mixture-of-experts tensors left float: this library quantizes Linear modules, and "
        "an expert is a slice of a 3-D tensor; quant=int4, gptq_int4, awq_int4 or hqq_int4 quantize each expert."
    )
