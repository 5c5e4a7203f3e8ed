"""The learning_dynamics analyzer: ``config`` (keys, checks), ``run`` (the work), ``plots`` (its figures),
``api`` (:func:`analyze_checkpoints`: the same analysis from Python on your checkpoints and data)."""

from modelxray.analyzers.learning_dynamics.api import analyze_checkpoints
from modelxray.analyzers.learning_dynamics.config import LearningDynamicsAnalyzer

__all__ = ["LearningDynamicsAnalyzer", "analyze_checkpoints"]
