"""How a quantization report draws and explains itself (figures, dashboard panel, insights); the
plotting module is imported only when a report is drawn."""

from __future__ import annotations

from modelxray.core.result import Result


class QuantPresentation:
    """Mixed into ``Quantizer``: the report writer finds it through ``Result.source``."""

    def figures(self, result: Result) -> dict:
        from modelxray.quant import plots

        return plots.figures(result)

    def panel(self, ax, result: Result) -> bool:
        from modelxray.quant import plots

        plots.panel(ax, result)
        return True

    def insights(self, result: Result, results: dict[str, Result]) -> list[str]:
        from modelxray.quant.insights import quant_insights

        return quant_insights(result)
