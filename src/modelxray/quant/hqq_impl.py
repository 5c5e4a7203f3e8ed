"""Quantizing with HQQ (``HQQQuantizer``): each chosen Linear of a copy replaced by ``HQQLinear``
(computing in the layer's own dtype, on its device); each reported as HQQ stores it (packed
integers, scales and zero points) against HQQ's own dequantized weight."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from modelxray.quant.library_swap import SwapParts, quantize_linears

if TYPE_CHECKING:
    from torch import nn

    from modelxray.core.result import Result
    from modelxray.quant.hqq_backend import HQQQuantizer


def stored_bytes(module: nn.Module) -> int:
    """Bytes of the tensors HQQ keeps for the weight: packed integers, scales and zero points."""
    return sum(t.numel() * t.element_size() for t in (module.W_q, module.meta["scale"], module.meta["zero"]))


def hqq_parts(quantizer: HQQQuantizer, keep_originals: bool = False) -> SwapParts:
    """HQQ's swap: each named Linear becomes ``HQQLinear`` (its zero points and scales fitted by HQQ's
    optimizer). ``keep_originals``: the Linear keeps its weight (a streamed block puts it back)."""
    from hqq.core.quantize import BaseQuantizeConfig, HQQLinear

    config = BaseQuantizeConfig(nbits=quantizer.bits, group_size=quantizer.group_size)

    def swap(copy: nn.Module, names: set[str]) -> None:
        for name in sorted(names):
            linear = copy.get_submodule(name)
            w = linear.weight
            hqq = HQQLinear(linear, config, compute_dtype=w.dtype, device=str(w.device), del_orig=not keep_originals)
            parent, _, child = name.rpartition(".")
            setattr(copy.get_submodule(parent) if parent else copy, child, hqq)

    def dequantized(module: nn.Module) -> torch.Tensor:
        return module.dequantize()

    note = (
        f"HQQ {quantizer.bits}-bit weights in groups of {quantizer.group_size}, run through HQQ's own modules: "
        "quality is the library's; sizes are the tensors it stores (packed integers, scales and zero points)."
    )

    def tensor(w: torch.Tensor) -> tuple[torch.Tensor, int]:
        """One matrix through HQQ's quantizer (as HQQLinear quantizes its weight), dequantized."""
        from hqq.core.quantize import Quantizer

        w_q, meta = Quantizer.quantize(w, device=str(w.device), compute_dtype=w.dtype, **config["weight_quant_params"])
        stored = sum(t.numel() * t.element_size() for t in (w_q, meta["scale"], meta["zero"]))
        return Quantizer.dequantize(w_q, meta), stored

    fmt = f"hqq {quantizer.bits}-bit g{quantizer.group_size}"
    return SwapParts(swap, dequantized, stored_bytes, fmt, quantizer.bits, [note], tensor)


def quantize_hqq(quantizer: HQQQuantizer, model: nn.Module) -> tuple[nn.Module, Result]:
    parts = hqq_parts(quantizer)
    return quantize_linears(
        quantizer,
        model,
        parts.swap,
        parts.dequantized,
        parts.stored_bytes,
        parts.fmt,
        parts.bits,
        parts.notes,
        parts.tensor,
    )
