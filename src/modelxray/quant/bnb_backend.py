"""bitsandbytes (``quant=bnb_nf4``, ``bnb_fp4``, ``bnb_int8``): each chosen Linear becomes
bitsandbytes' ``Linear4bit`` (NF4 or FP4 codes in blocks of 64 with an absmax scale each, the
format of QLoRA and of ``load_in_4bit``) or ``Linear8bitLt`` (LLM.int8(): int8 weights with a scale
per output channel), run through bitsandbytes' own kernels: on a CUDA GPU, and on CPU where the
installed bitsandbytes has its CPU backend (0.45 and later).

This module is the config; the quantization runs in ``bnb_impl`` (imported when it quantizes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from modelxray.quant.library_backend import LibraryQuantizer

if TYPE_CHECKING:
    from modelxray.core.result import Result

WEIGHTS = ("nf4", "fp4", "int8")


@dataclass
class BitsAndBytesQuantizer(LibraryQuantizer):
    name: ClassVar[str] = "bnb"
    module: ClassVar[str] = "bitsandbytes"
    pip: ClassVar[str] = "bitsandbytes"
    run_module: ClassVar[str] = "modelxray.quant.bnb_impl"
    run_function: ClassVar[str] = "quantize_bnb"

    weights: str = "nf4"  # nf4 | fp4 (4-bit codes, blocks of 64) | int8 (LLM.int8(), per output channel)
    double_quant: bool = False  # 4-bit: quantize the block scales too (QLoRA's double quantization)
    outlier_threshold: float = 0.0  # int8: activations above it run in 16 bits (LLM.int8()'s 6.0); 0: all int8

    def validate(self) -> None:
        self.require_choice("weights", WEIGHTS)
        if self.outlier_threshold < 0:
            from modelxray.core.errors import ConfigError

            raise ConfigError(
                "outlier_threshold", f"must be 0 (no outliers kept) or more, got {self.outlier_threshold}"
            )
        super().validate()

    def describe(self) -> str:
        return f"bitsandbytes {self.weights}"

    def step(self, result: Result) -> dict[str, Any]:
        return {"method": "bnb", "config": self.weights}
