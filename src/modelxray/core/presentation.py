"""Drawing a Result from a plotting module named on the class, imported only when a report is drawn.

An analyzer, a quantizer or the training stage sets ``plots_module`` to a module with
``figures(result) -> {file stem: Figure}`` and, optionally, ``panel(ax, result)`` (its dashboard
panel). The report writer calls ``figures``/``panel`` through ``Result.source``; matplotlib is
imported by that module, so nothing draws (or imports a plotting library) before a report is written.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

from modelxray.core.result import Result


class PlotsFromModule:
    """``figures`` and ``panel`` delegated to ``plots_module`` (none when it is empty)."""

    plots_module: ClassVar[str] = ""  # e.g. "modelxray.analyzers.bitwidth.plots"

    def _plots(self) -> Any:
        return importlib.import_module(self.plots_module) if self.plots_module else None

    def figures(self, result: Result) -> dict[str, Any]:
        plots = self._plots()
        return plots.figures(result) if plots is not None else {}

    def has_panel(self) -> bool:
        """Whether ``panel`` draws anything: overridden, or the plotting module has one."""
        if type(self).panel is not PlotsFromModule.panel:
            return True
        plots = self._plots()
        return plots is not None and hasattr(plots, "panel")

    def panel(self, ax, result: Result) -> bool:
        """Draw the dashboard panel; False when the module has none."""
        plots = self._plots()
        if plots is None or not hasattr(plots, "panel"):
            return False
        plots.panel(ax, result)
        return True
