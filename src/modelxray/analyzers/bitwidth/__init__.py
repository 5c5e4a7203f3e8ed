"""The bitwidth analyzer: ``config`` (keys, checks), ``run`` (the work), ``plots`` and
``insights`` (how its result is drawn and explained)."""

from modelxray.analyzers.bitwidth.config import BitwidthAnalyzer

__all__ = ["BitwidthAnalyzer"]
