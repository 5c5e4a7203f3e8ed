"""The lm_eval analyzer: ``config`` (keys, checks), ``run`` (the work), ``plots`` and ``insights``
(how its result is drawn and explained); ``offline_tasks`` is its default task pack."""

from modelxray.analyzers.lm_eval.config import LmEvalAnalyzer

__all__ = ["LmEvalAnalyzer"]
