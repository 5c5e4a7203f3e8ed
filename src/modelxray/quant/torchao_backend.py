"""Real low-bit kernels through torchao (``quant=int8_torchao``, ``quant=int8_dynamic_torchao``).

The RTN/GPTQ/AWQ quantizers simulate low-bit weights in float32, which measures accuracy at any
bit width but not memory or speed. torchao swaps each targeted Linear weight for an int8 tensor
subclass whose matmuls run int8 kernels on this CPU (weight-only: int8 weights, float
activations; dynamic: int8 weights and per-token int8 activations), so the performance analyzer
measures the real memory and latency of the quantized model.

This module is the config; the quantization runs in ``torchao_impl`` (imported when it quantizes).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from modelxray.core.errors import ConfigError
from modelxray.quant.library_backend import LibraryQuantizer

if TYPE_CHECKING:
    from torch import nn

    from modelxray.core.result import Result

METHODS = ("int8_weight_only", "int8_dynamic", "int4_weight_only")


def int4_kernels() -> str | None:
    """None when torchao's int4 weight-only kernels can run here, else why not (torchao 0.18 runs
    them through the mslk package)."""
    if importlib.util.find_spec("mslk") is None:
        return "torchao's int4 weight-only kernels need the mslk package (pip install mslk; a CUDA GPU for most builds)"
    return None


@dataclass
class TorchaoQuantizer(LibraryQuantizer):
    name: ClassVar[str] = "torchao"
    module: ClassVar[str] = "torchao"
    pip: ClassVar[str] = "torchao"
    extra: ClassVar[str] = "kernels"
    run_module: ClassVar[str] = "modelxray.quant.torchao_impl"
    run_function: ClassVar[str] = "quantize_torchao"

    method: str = "int8_weight_only"

    def validate(self) -> None:
        self.require_choice("method", METHODS)
        super().validate()

    def describe(self) -> str:
        return f"torchao {self.method}"

    def unsupported_here(self) -> str | None:
        """Why this method cannot run on this machine, or None."""
        return int4_kernels() if self.method == "int4_weight_only" else None

    def check(self, model: nn.Module, name: str | None = None) -> None:
        why_not = self.unsupported_here()
        if why_not is not None:
            raise ConfigError("quant", f"{why_not}; quant=int4 simulates the same format on any machine")
        super().check(model, name)

    def step(self, result: Result) -> dict[str, Any]:
        return {"method": "torchao", "config": self.method}

    def support_here(self, profile: dict) -> tuple[bool, str]:
        if not profile["torchao_installed"]:
            return False, "needs torchao (pip install torchao)"
        why_not = self.unsupported_here()
        if why_not is not None:
            return False, why_not
        bits = "int4" if self.method == "int4_weight_only" else "int8"
        return True, f"real {bits} kernels: memory and latency are measured"
