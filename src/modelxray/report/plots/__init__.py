"""Plots per analyzer: ``figures(result) -> {filename: Figure}`` and ``panel(ax, result)`` for the
summary dashboard. Analyzers never import matplotlib; this registry maps analyzer names to plotters."""

from __future__ import annotations

import importlib
from types import ModuleType

_PLOTTERS = {
    "quant": "modelxray.report.plots.quant",
    "performance": "modelxray.report.plots.performance",
    "bitwidth": "modelxray.report.plots.bitwidth",
    "quant_impact": "modelxray.report.plots.quant_impact",
    "robustness": "modelxray.report.plots.robustness",
    "inspect": "modelxray.report.plots.inspect",
    "train": "modelxray.report.plots.train",
    "learning_dynamics": "modelxray.report.plots.learning_dynamics",
}


def plotter_for(analyzer: str) -> ModuleType | None:
    module = _PLOTTERS.get(analyzer)
    return importlib.import_module(module) if module else None


def register(analyzer: str, module: str) -> None:
    """Register the plotting module of a new analyzer (``figures`` and ``panel`` functions)."""
    _PLOTTERS[analyzer] = module
