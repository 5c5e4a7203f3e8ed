"""What the learning callbacks share: config handling, label lookup, epoch counting, save/load.

Their configs live in ``configs`` (importable without numpy or torch)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar

from modelxray.core.callbacks import Callback, TrainState
from modelxray.learning_dynamics.callbacks.configs import CallbackConfig


class LearningCallback(Callback):
    """Base of the learning-dynamics callbacks.

    Build with a config dataclass, a dict, or keywords: ``ExampleDynamicsCallback(track_examples=500)``.
    Epochs are counted by the callback itself (calls of ``on_epoch_end``), so it does not depend on
    whether the loop's ``state.epoch`` is 0- or 1-based; ``state.epoch`` and ``state.step`` are only
    recorded as labels."""

    config_class: ClassVar[type[CallbackConfig]]
    extra_key: ClassVar[str] = ""  # where the callback publishes itself in ``state.extra``

    def __init__(self, config: Any = None, **overrides: Any):
        if config is None:
            config = self.config_class(**overrides)
        elif isinstance(config, dict):
            config = self.config_class(**{**config, **overrides})
        elif overrides:
            config = dataclasses.replace(config, **overrides)
        if not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__} needs a {self.config_class.__name__}, got {type(config).__name__}")
        self.config = config
        self.epochs_seen = 0

    def _publish(self, state: TrainState) -> None:
        if self.extra_key and isinstance(state.extra, dict):
            state.extra[self.extra_key] = self

    def _due(self, every: int) -> bool:
        """Whether the epoch now running (``epochs_seen`` of them finished) is one to measure."""
        return self.epochs_seen % every == 0

    # ---- state ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:  # pragma: no cover - overridden
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # pragma: no cover - overridden
        pass

    def save(self, path: str | Path) -> tuple[Path, Path]:
        """Write config and state as ``path.json`` + ``path.npz`` (no pickle)."""
        from modelxray.learning_dynamics.state import save_state

        return save_state(
            path,
            {
                "callback": type(self).__name__,
                "config": dataclasses.asdict(self.config),
                "epochs_seen": self.epochs_seen,
                "state": self.state_dict(),
            },
        )

    @classmethod
    def load(cls, path: str | Path):
        from modelxray.learning_dynamics.state import load_state

        doc = load_state(path)
        if doc.get("callback") != cls.__name__:
            raise ValueError(f"{path} holds a {doc.get('callback')}, not a {cls.__name__}")
        cb = cls(cls.config_class(**doc["config"]))
        cb.epochs_seen = int(doc["epochs_seen"])
        cb.load_state_dict(doc["state"])
        return cb


def task_data(state: TrainState):
    """The ClassificationData of the run (``state.task.data``), or a clear error."""
    data = getattr(state.task, "data", None)
    if data is None or not hasattr(data, "y_train"):
        raise ValueError(
            "the learning callbacks need a classification task: state.task.data with "
            "x_train/y_train/x_test/y_test (e.g. dataset=digits or dataset=modular_addition)"
        )
    return data


def finite(metrics: dict[str, float]) -> dict[str, float]:
    """Drop None/NaN entries (nothing to log yet)."""
    out = {}
    for k, v in metrics.items():
        if v is None:
            continue
        v = float(v)
        if v == v:
            out[k] = v
    return out
