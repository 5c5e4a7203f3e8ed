"""The performance analyzer: ``config`` (keys, checks), ``run`` (the measurements), ``plots`` and
``insights`` (how its result is drawn and explained)."""

from modelxray.analyzers.performance.config import PerformanceAnalyzer

__all__ = ["PerformanceAnalyzer"]
