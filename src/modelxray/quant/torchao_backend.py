"""Real low-bit kernels through torchao (``quant=int8_torchao``, ``quant=int8_dynamic_torchao``).

The RTN/GPTQ/AWQ quantizers simulate low-bit weights in float32, which measures accuracy at any
bit width but not memory or speed. torchao swaps each targeted Linear weight for an int8 tensor
subclass whose matmuls run int8 kernels on this CPU (weight-only: int8 weights, float
activations; dynamic: int8 weights and per-token int8 activations), so the performance analyzer
measures the real memory and latency of the quantized model.

This module is the config; the quantization runs in ``torchao_impl`` (imported when it quantizes).
"""

from __future__ import annotations

import fnmatch
import importlib.util
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from modelxray.core.configurable import implementation
from modelxray.core.errors import ConfigError
from modelxray.quant.base import Quantizer

if TYPE_CHECKING:
    from torch import nn

    from modelxray.core.result import Result

METHODS = ("int8_weight_only", "int8_dynamic")


@dataclass
class TorchaoQuantizer(Quantizer):
    name: ClassVar[str] = "torchao"

    method: str = "int8_weight_only"
    skip: list[str] = field(default_factory=list)  # glob patterns of module names to leave in float

    def validate(self) -> None:
        self.require_choice("method", METHODS)
        if importlib.util.find_spec("torchao") is None:
            raise ConfigError("method", f"{self.method} needs the torchao package: pip install torchao")

    def check(self, model: nn.Module, name: str | None = None) -> None:
        """Nothing to quantize (a TorchScript model, no Linear layer, everything skipped) fails here."""
        from modelxray.quant.targets import find_targets, no_match_message

        targets = find_targets(model)
        if not chosen_linears(targets, self.skip):
            what = f"torchao {self.method} (targets linear" + (f"; skip {', '.join(self.skip)})" if self.skip else ")")
            raise ConfigError("quant", no_match_message(what, model, targets, name))

    def quantize(
        self, model: nn.Module, calibration: Any = None, *, in_place: bool = False
    ) -> tuple[nn.Module, Result]:
        self.check(model)
        return implementation("modelxray.quant.torchao_impl").quantize_torchao(self, model)

    def step(self, result: Result) -> dict[str, Any]:
        return {"method": "torchao", "config": self.method}


def chosen_linears(targets: list, skip: list[str]) -> set[str]:
    """Names of the ``linear`` targets torchao quantizes: every one not matched by a ``skip`` glob."""
    return {t.name for t in targets if t.kind == "linear" and not any(fnmatch.fnmatchcase(t.name, p) for p in skip)}
