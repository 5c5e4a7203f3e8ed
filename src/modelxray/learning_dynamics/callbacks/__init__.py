"""Learning-dynamics callbacks for the one training loop (``modelxray.training``); each also works in
any loop that calls the hooks of :class:`modelxray.core.callbacks.Callback` with a ``TrainState``.

The configs import nothing heavy; each callback (numpy, torch, scikit-learn) is imported when first
named here, so validating ``train.learning`` stays cheap."""

from __future__ import annotations

from modelxray.core.lazy import lazy_exports

_EXPORTS = {
    "CallbackConfig": "configs",
    "ExampleDynamicsConfig": "configs",
    "FeatureEvolutionConfig": "configs",
    "GradientFlowConfig": "configs",
    "MemorizationConfig": "configs",
    "TransitionAttributionConfig": "configs",
    "LearningCallback": "base",
    "ExampleDynamicsCallback": "examples",
    "FeatureEvolutionCallback": "features",
    "GradientFlowCallback": "gradient_flow",
    "MemorizationCallback": "memorization",
    "TransitionAttributionCallback": "attribution",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)  # the names above, imported on first use
