"""The float weight a quantized layer computes with, whichever library holds it: a tensor subclass
with ``dequantize()`` (torchao, optimum-quanto), bitsandbytes' packed 4-bit and int8 parameters,
or a module that keeps its packed codes in other names and dequantizes as a whole (HQQ's
``HQQLinear``). Weight statistics of a quantized model are of these values, never of packed bytes.

No library offers this across formats; each branch calls the library's own dequantization."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn


def plain_weight(module: nn.Module, p: torch.Tensor) -> torch.Tensor:
    """``p``, a parameter of ``module``, as the float tensor it stands for."""
    if getattr(p, "quant_state", None) is not None:  # bitsandbytes' Params4bit: codes and block scales
        import bitsandbytes as bnb

        return bnb.functional.dequantize_4bit(p.data, p.quant_state)
    if p.dtype == torch.int8:  # bitsandbytes' Int8Params: the row scales on the weight, or in the layer's state
        scales = getattr(p, "SCB", None)
        scales = scales if scales is not None else getattr(getattr(module, "state", None), "SCB", None)
        if scales is not None:
            return p.data.float() * scales.float()[:, None] / 127
    if type(p) not in (torch.Tensor, nn.Parameter) and callable(getattr(p, "dequantize", None)):
        return p.dequantize()  # torchao's and optimum-quanto's tensor subclasses
    return p.detach()


def dequantized_tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Every weight of ``model`` once (tied weights once), as float tensors: parameters as they are,
    a quantized library's as it dequantizes them."""
    seen: set[int] = set()
    for mname, module in model.named_modules():
        prefix = f"{mname}." if mname else ""
        # HQQ's HQQLinear keeps its packed codes in W_q (no weight) and dequantizes as a whole
        whole = isinstance(getattr(module, "W_q", None), torch.Tensor) and callable(getattr(module, "dequantize", None))
        own = list(module.named_parameters(recurse=False))
        if whole and own:
            seen.update(id(p) for _, p in own)
            yield f"{prefix}weight", module.dequantize().detach()
            continue
        for pname, p in own:
            if id(p) in seen:
                continue
            seen.add(id(p))
            yield f"{prefix}{pname}", plain_weight(module, p)
