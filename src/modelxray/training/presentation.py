"""How a training report draws itself (loss curves, parameter-change heat map, gradient norms,
sparse quality, learning-dynamics figures); the plotting module is imported only when drawn."""

from __future__ import annotations

from modelxray.core.result import Result


class TrainPresentation:
    """Mixed into ``TrainConfig``: the report writer finds it through ``Result.source``."""

    def figures(self, result: Result) -> dict:
        from modelxray.training import plots

        return plots.figures(result)

    def panel(self, ax, result: Result) -> bool:
        from modelxray.training import plots

        plots.panel(ax, result)
        return True

    def insights(self, result: Result, results: dict[str, Result]) -> list[str]:
        return []
