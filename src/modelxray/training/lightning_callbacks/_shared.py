"""What both callbacks share: their metrics sent to every logger of the trainer (and the active MLflow
run), finite numbers only, and the first loader of Lightning's dataloader collections."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import Any


def _finite(metrics: dict[str, Any]) -> dict[str, float]:
    """Numbers only, and only finite ones: loggers reject NaN (MLflow) or chart it as a gap."""
    out = {}
    for k, v in metrics.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)):
            out[k] = float(v)
    return out


def _has_mlflow_logger(trainer) -> bool:
    return any(type(lg).__name__ == "MLFlowLogger" for lg in trainer.loggers)


def emit(trainer, metrics: dict[str, float], step: int) -> None:
    """Send ``metrics`` to every logger of the trainer at ``step``, and to the active MLflow run when
    no ``MLFlowLogger`` of the trainer already receives them. Without ``mlflow`` imported there can be
    no active run, so a user who never imported it does not pay for the import."""
    if not metrics:
        return
    for lg in trainer.loggers:
        lg.log_metrics(dict(metrics), step=step)
    if "mlflow" in sys.modules and not _has_mlflow_logger(trainer):
        from modelxray.tracking.mlflow_tracker import log_to_active_run

        log_to_active_run(metrics, step)


def _first_loader(loaders: Any) -> Any:
    """The first of Lightning's dataloader collections (a loader, a list or a dict of them)."""
    if isinstance(loaders, Mapping):
        return next(iter(loaders.values()), None)
    if isinstance(loaders, (list, tuple)):
        return loaders[0] if loaders else None
    return loaders
