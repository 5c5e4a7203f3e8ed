"""How a training report draws itself (loss curves, parameter-change heat map, gradient norms,
sparse quality, learning-dynamics figures); the plotting module is imported only when drawn."""

from __future__ import annotations

from typing import ClassVar

from modelxray.core.presentation import PlotsFromModule
from modelxray.core.result import Result


class TrainPresentation(PlotsFromModule):
    """Mixed into ``TrainConfig``: the report writer finds it through ``Result.source``."""

    plots_module: ClassVar[str] = "modelxray.training.plots"

    def insights(self, result: Result, results: dict[str, Result]) -> list[str]:
        return []
