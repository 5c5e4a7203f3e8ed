"""Quantizing with optimum-quanto (``QuantoQuantizer``): ``quantize`` and ``freeze`` on the chosen
Linear layers of a copy; each layer reported as quanto stores it (its packed data, scales and
shifts) against quanto's own dequantized weight."""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from modelxray.quant.library_swap import quantize_linears

if TYPE_CHECKING:
    from torch import nn

    from modelxray.core.result import Result
    from modelxray.quant.quanto_backend import QuantoQuantizer

BITS = {"int8": 8, "int4": 4, "int2": 2}


def stored_bytes(module: nn.Module) -> int:
    """Bytes of the tensors quanto keeps for the weight (packed integers, scales, shifts)."""
    return sum(t.numel() * t.element_size() for k, t in module.state_dict().items() if k.startswith("weight"))


@functools.cache
def _outside_inference_mode(cls: type) -> type:
    """``cls`` (quanto's QLinear) whose forward runs outside ``torch.inference_mode``, without
    gradients, on a copy of its input: quanto's kernels set tensors' version counters, which tensors
    made in inference mode refuse, and modelxray scores models in inference mode. Same name, so
    reports still say QLinear."""

    def forward(self, x):
        with torch.inference_mode(False), torch.no_grad():
            return cls.forward(self, x.clone())

    return type(cls.__name__, (cls,), {"forward": forward, "__module__": cls.__module__})


def _build_cpu_kernels(weights: str, model: nn.Module) -> None:
    """quanto unpacks int4 and int2 weights on a CPU with a C++ extension it compiles at its first
    use in an environment (about a minute on 2 cores), into its own package folder. Build it here,
    saying so, rather than as a silent minute inside the first timed forward pass."""
    if weights == "int8" or any(p.device.type != "cpu" for p in model.parameters()):
        return
    from optimum.quanto.library.extensions import get_extension, is_extension_available

    if not is_extension_available("quanto_cpp"):
        return
    ext = get_extension("quanto_cpp")
    built = Path(ext.build_directory)
    version = built / "pytorch_version.txt"  # quanto rebuilds for another torch
    if (built / f"{ext.name}.so").exists() and version.exists() and version.read_text().strip() == torch.__version__:
        return
    from modelxray.core.progress import log

    start = time.perf_counter()
    log.info("quanto: building optimum-quanto's CPU kernels (once per environment, about a minute on 2 cores)")
    ext.lib  # noqa: B018 - the property compiles and loads the extension
    log.info("quanto: CPU kernels built in %.0f s, in %s", time.perf_counter() - start, ext.build_directory)


def quantize_quanto(quantizer: QuantoQuantizer, model: nn.Module) -> tuple[nn.Module, Result]:
    from optimum import quanto

    _build_cpu_kernels(quantizer.weights, model)
    qtype = {"int8": quanto.qint8, "int4": quanto.qint4, "int2": quanto.qint2}[quantizer.weights]

    def swap(copy: nn.Module, names: set[str]) -> None:
        quanto.quantize(copy, weights=qtype, include=sorted(names))
        quanto.freeze(copy)
        for name in names:
            module = copy.get_submodule(name)
            module.__class__ = _outside_inference_mode(type(module))

    def dequantized(module: nn.Module) -> torch.Tensor:
        return module.weight.dequantize()

    note = (
        f"optimum-quanto {quantizer.weights} weights, run through quanto's own modules: quality is the "
        "library's; sizes are the tensors it stores (packed integers with their scales and shifts)."
    )
    fmt = f"quanto {quantizer.weights}"
    return quantize_linears(quantizer, model, swap, dequantized, stored_bytes, fmt, BITS[quantizer.weights], [note])
