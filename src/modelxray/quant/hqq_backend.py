"""HQQ, half-quadratic quantization (``quant=hqq_int4``, ``hqq_int3``, ``hqq_int2``): each chosen
Linear becomes HQQ's ``HQQLinear``, whose zero points and scales per group are fitted by HQQ's
optimizer without calibration data; the forward runs HQQ's own dequantize-and-matmul.

This module is the config; the quantization runs in ``hqq_impl`` (imported when it quantizes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from modelxray.quant.library_backend import LibraryQuantizer

if TYPE_CHECKING:
    from torch import nn

    from modelxray.core.result import Result

BITS = (8, 4, 3, 2, 1)  # what HQQ packs


@dataclass
class HQQQuantizer(LibraryQuantizer):
    name: ClassVar[str] = "hqq"
    module: ClassVar[str] = "hqq.core.quantize"
    pip: ClassVar[str] = "hqq"
    run_module: ClassVar[str] = "modelxray.quant.hqq_impl"
    run_function: ClassVar[str] = "quantize_hqq"
    parts_function: ClassVar[str] = "hqq_parts"  # streams block by block (runtime.offload=blocks)

    bits: int = 4  # 8, 4, 3, 2 or 1
    group_size: int = 64  # weights per scale and zero point

    def validate(self) -> None:
        self.require_choice("bits", BITS)
        self.require_positive("group_size")
        super().validate()

    def describe(self) -> str:
        return f"HQQ {self.bits}-bit (groups of {self.group_size})"

    def check(self, model: nn.Module, name: str | None = None) -> None:
        super().check(model, name)
        from modelxray.core.errors import ConfigError
        from modelxray.quant.library_backend import chosen_linears
        from modelxray.quant.targets import find_targets

        chosen = chosen_linears(find_targets(model), self.skip)
        for n, m in model.named_modules():
            if n in chosen and m.weight.numel() % self.group_size:
                raise ConfigError(
                    "quant.group_size",
                    f"{n} holds {m.weight.numel():,} weights, not a multiple of {self.group_size}: choose a "
                    "group size that divides every layer's, or skip the layer",
                )

    def step(self, result: Result) -> dict[str, Any]:
        return {"method": "hqq", "bits": self.bits, "group_size": self.group_size}
