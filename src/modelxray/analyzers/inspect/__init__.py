"""The inspect analyzer: ``config`` (keys, checks), ``run`` (the work), ``plots`` and
``insights`` (how its result is drawn and explained)."""

from modelxray.analyzers.inspect.config import InspectAnalyzer

__all__ = ["InspectAnalyzer"]
