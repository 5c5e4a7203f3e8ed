"""The training loop's callback protocol, at the path users of the loop import it from.

Defined in :mod:`modelxray.core.callbacks` so that plug-ins below the loop (``modelxray.learning_dynamics``)
implement it without importing ``modelxray.training``; this module only re-exports it."""

from modelxray.core.callbacks import Callback, CallbackReport, TrainState

__all__ = ["Callback", "CallbackReport", "TrainState"]
