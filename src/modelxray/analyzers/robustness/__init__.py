"""The robustness analyzer: ``config`` (keys, checks), ``run`` (the work), ``plots`` (its figures)."""

from modelxray.analyzers.robustness.config import RobustnessAnalyzer

__all__ = ["RobustnessAnalyzer"]
