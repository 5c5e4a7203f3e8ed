"""Learning-dynamics callbacks for the one training loop (``modelxray.training``); each also works in
any loop that calls the hooks of :class:`modelxray.core.callbacks.Callback` with a ``TrainState``.

The configs import nothing heavy; each callback (numpy, torch, scikit-learn) is imported when first
named here, so validating ``train.learning`` stays cheap."""

from __future__ import annotations

import importlib

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


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
