"""How a quantization report draws and explains itself (figures, dashboard panel, insights); the
plotting module is imported only when a report is drawn."""

from __future__ import annotations

from typing import ClassVar

from modelxray.core.presentation import PlotsFromModule
from modelxray.core.result import Result


class QuantPresentation(PlotsFromModule):
    """Mixed into ``Quantizer``: the report writer finds it through ``Result.source``."""

    plots_module: ClassVar[str] = "modelxray.quant.plots"

    def insights(self, result: Result, results: dict[str, Result]) -> list[str]:
        from modelxray.quant.insights import quant_insights

        return quant_insights(result)
