"""Plots of ``analyzer=learning_dynamics``: the learning-dynamics figures over checkpoints."""

from __future__ import annotations

from modelxray.learning_dynamics import plots as learning


def figures(result) -> dict:
    parts = {
        name: {"data": data, "tables": result.tables, "metrics": result.metrics}
        for name, data in (result.data.get("learning") or {}).items()
    }
    return learning.figures(parts, unit=result.data.get("checkpoint_unit", "step"))
