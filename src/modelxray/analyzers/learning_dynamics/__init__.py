"""The learning_dynamics analyzer: ``config`` (keys, checks), ``run`` (the work), ``plots`` (its figures).
The same analysis from Python on your checkpoints and data: ``modelxray.analyze_checkpoints``."""

from modelxray.analyzers.learning_dynamics.config import CheckpointDynamicsAnalyzer

__all__ = ["CheckpointDynamicsAnalyzer"]
