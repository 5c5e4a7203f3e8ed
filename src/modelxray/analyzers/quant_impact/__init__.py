"""The quant_impact analyzer: ``config`` (keys, checks), ``run`` (the work), ``plots`` (its figures)."""

from modelxray.analyzers.quant_impact.config import QuantImpactAnalyzer

__all__ = ["QuantImpactAnalyzer"]
