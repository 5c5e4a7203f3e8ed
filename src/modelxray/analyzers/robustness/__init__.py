"""The robustness analyzer: ``config`` (keys, checks), ``run`` (the work), ``plots`` and
``insights`` (how its result is drawn and explained)."""

from modelxray.analyzers.robustness.config import RobustnessAnalyzer

__all__ = ["RobustnessAnalyzer"]
