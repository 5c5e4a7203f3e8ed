"""``quant=none``: the model as loaded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from modelxray.quant.base import Quantizer


@dataclass
class NoQuant(Quantizer):
    name: ClassVar[str] = "none"

    def quantize(self, model, calibration=None, *, in_place=False):
        return model, None  # nothing changes, so no copy and no report

    def support_here(self, profile: dict) -> tuple[bool, str]:
        return True, "baseline"
