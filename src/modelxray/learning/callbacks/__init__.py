"""Learning-dynamics callbacks for the one training loop (``modelxray.training``); each also works in
any loop that calls the hooks of :class:`modelxray.training.callbacks.Callback` with a ``TrainState``."""

from modelxray.learning.callbacks.attribution import TransitionAttributionCallback, TransitionAttributionConfig
from modelxray.learning.callbacks.base import LearningCallback
from modelxray.learning.callbacks.examples import ExampleDynamicsCallback, ExampleDynamicsConfig
from modelxray.learning.callbacks.features import FeatureEvolutionCallback, FeatureEvolutionConfig
from modelxray.learning.callbacks.gradient_flow import GradientFlowCallback, GradientFlowConfig
from modelxray.learning.callbacks.memorization import MemorizationCallback, MemorizationConfig

__all__ = [
    "LearningCallback",
    "ExampleDynamicsCallback",
    "ExampleDynamicsConfig",
    "GradientFlowCallback",
    "GradientFlowConfig",
    "MemorizationCallback",
    "MemorizationConfig",
    "FeatureEvolutionCallback",
    "FeatureEvolutionConfig",
    "TransitionAttributionCallback",
    "TransitionAttributionConfig",
]
