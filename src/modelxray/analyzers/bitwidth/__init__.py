"""The bitwidth analyzer: ``config`` (keys, checks), ``run`` (the work), ``plots`` (its figures)."""

from modelxray.analyzers.bitwidth.config import BitwidthAnalyzer

__all__ = ["BitwidthAnalyzer"]
