"""The learning_dynamics analyzer: ``config`` (keys, checks), ``run`` (the work), ``plots`` (its figures)."""

from modelxray.analyzers.learning_dynamics.config import LearningDynamicsAnalyzer

__all__ = ["LearningDynamicsAnalyzer"]
