"""The inspect analyzer: ``config`` (keys, checks), ``run`` (the work), ``plots`` (its figures)."""

from modelxray.analyzers.inspect.config import InspectAnalyzer

__all__ = ["InspectAnalyzer"]
