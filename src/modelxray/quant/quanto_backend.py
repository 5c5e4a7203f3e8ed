"""optimum-quanto's weight quantization (``quant=quanto_int8``, ``quanto_int4``, ``quanto_int2``):
each chosen Linear becomes quanto's ``QLinear`` with packed integer weights (int4 and int2 in groups
of 128 with a float scale and shift per group, int8 per output channel), run through quanto's own
kernels, so quality is the library's and sizes are what it stores.

This module is the config; the quantization runs in ``quanto_impl`` (imported when it quantizes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from modelxray.quant.library_backend import LibraryQuantizer

if TYPE_CHECKING:
    from modelxray.core.result import Result

WEIGHTS = ("int8", "int4", "int2")


@dataclass
class QuantoQuantizer(LibraryQuantizer):
    name: ClassVar[str] = "quanto"
    module: ClassVar[str] = "optimum.quanto"
    pip: ClassVar[str] = "optimum-quanto"
    run_module: ClassVar[str] = "modelxray.quant.quanto_impl"
    run_function: ClassVar[str] = "quantize_quanto"

    weights: str = "int4"  # int8 | int4 | int2: quanto's qint8, qint4, qint2 weights

    def validate(self) -> None:
        self.require_choice("weights", WEIGHTS)
        super().validate()

    def describe(self) -> str:
        return f"quanto {self.weights} weights"

    def step(self, result: Result) -> dict[str, Any]:
        return {"method": "quanto", "config": self.weights}
