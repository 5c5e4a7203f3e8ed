"""PyTorch Lightning callbacks: the weight-dynamics monitor and the learning-dynamics trackers inside
``lightning.Trainer``, beside the ``transformers.Trainer`` callback (:mod:`.hf_callback`).

    from modelxray.training_dynamics import DynamicsConfig
    from modelxray.training.lightning_callbacks import DynamicsCallback, LearningDynamicsCallback

    trainer = lightning.Trainer(
        max_epochs=20,
        callbacks=[DynamicsCallback(DynamicsConfig(interval=50)), LearningDynamicsCallback(num_classes=10)],
    )
    trainer.fit(module, train_loader, val_loader)

Both send their metrics to every logger of the trainer (``trainer.loggers``: CSV, TensorBoard,
MLflow, W&B ...) at ``trainer.global_step``, the number of optimizer steps done, as the Hugging Face
callback and modelxray's own loop do. They call the loggers directly rather than
``pl_module.log_dict``: Lightning writes step metrics only every ``log_every_n_steps`` steps and
as float32, which would drop or round the measurements. When an MLflow run is active
(``mlflow.start_run()`` around ``fit``) and no ``MLFlowLogger`` is among the trainer's loggers, the
same names go to that run too (so nothing is logged twice).

Lightning is an optional dependency (``pip install "modelxray[lightning]"``); this package is the
only part of modelxray that imports it, and checks for it before any of its modules loads.

:mod:`.dynamics` holds ``DynamicsCallback``, :mod:`.learning` ``LearningDynamicsCallback``, and
:mod:`._shared` what both use (``emit``: the metrics to the loggers).
"""

from __future__ import annotations

try:
    from lightning.pytorch import Callback  # noqa: F401 - the one check, before the modules below import it
except ImportError:  # pragma: no cover - exercised only where lightning is absent
    raise ImportError(
        'modelxray.training.lightning_callbacks needs PyTorch Lightning: pip install "modelxray[lightning]"'
    ) from None

from modelxray.training.lightning_callbacks._shared import emit as emit  # public before the split, not in __all__
from modelxray.training.lightning_callbacks.dynamics import DynamicsCallback
from modelxray.training.lightning_callbacks.dynamics import is_last_step as is_last_step  # likewise
from modelxray.training.lightning_callbacks.learning import LearningDynamicsCallback

__all__ = ["DynamicsCallback", "LearningDynamicsCallback"]
