"""The quant_impact analyzer: ``config`` (keys, checks), ``run`` (the work), ``plots`` and
``insights`` (how its result is drawn and explained)."""

from modelxray.analyzers.quant_impact.config import QuantImpactAnalyzer

__all__ = ["QuantImpactAnalyzer"]
