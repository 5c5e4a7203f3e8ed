"""MemorizationDetector: train vs test accuracy and loss from a user's DataLoaders, on
MemorizationCallback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from modelxray.core.errors import ConfigError
from modelxray.learning_dynamics.callbacks.configs import MemorizationConfig
from modelxray.learning_dynamics.callbacks.memorization import MemorizationCallback
from modelxray.learning_dynamics.evaluation import evaluate_loader
from modelxray.learning_dynamics.loaders import batch_pair
from modelxray.learning_dynamics.trackers._shared import _config, _restored, _save_figures, _saved


def _peek(loader, key: str) -> None:
    """Check a DataLoader's first batch before any work (random state kept)."""
    with torch.random.fork_rng(devices=[]):
        for batch in loader:
            batch_pair(batch, key)
            return
    raise ConfigError(key, "yielded no batch")


def _int_or_none(v) -> int | None:
    return None if v is None or v != v else int(v)


class MemorizationDetector:
    """Train vs test accuracy and loss over epochs from your DataLoaders, and when the gap between
    them opens and closes.

    ``compute_memorization_scores(model, train_loader, test_loader, epoch)`` evaluates both loaders
    (no gradients, eval mode) and returns ``train_accuracy``, ``test_accuracy``, ``train_loss``,
    ``test_loss``, ``gap_accuracy``, ``gap_loss`` and ``memorization_score`` (= ``gap_accuracy``,
    train minus test accuracy: positive when the model does better on what it trained on)."""

    def __init__(self, num_classes: int | None = None, device: Any = None, **options: Any):
        self.num_classes = num_classes
        self.device = device
        unused = ("every_n_epochs", "max_train_eval", "max_test_eval", "batch_size")  # the loaders decide
        self.config = _config(MemorizationConfig, "MemorizationDetector", options, unused)
        self.callback = MemorizationCallback(self.config)
        self.epoch_memorization: list[dict[str, Any]] = []
        self._checked = False

    def compute_memorization_scores(self, model: nn.Module, train_loader, test_loader, epoch: int) -> dict[str, Any]:
        if not self._checked:  # both loaders' structure, before any forward
            _peek(train_loader, "train_loader")
            _peek(test_loader, "test_loader")
            self._checked = True
        with torch.random.fork_rng(devices=[]):
            tr = evaluate_loader(model, train_loader, "train_loader", self.num_classes)
            te = evaluate_loader(model, test_loader, "test_loader", self.num_classes)
        self.callback.record(int(epoch), int(epoch), tr, te)
        s = {k: v[-1] for k, v in self.callback.series.items()}
        out = {
            "epoch": int(epoch),
            "train_accuracy": s["train_accuracy"],
            "test_accuracy": s["test_accuracy"],
            "train_loss": s["train_loss"],
            "test_loss": s["test_loss"],
            "gap_accuracy": s["gap_accuracy"],
            "gap_loss": s["gap_loss"],
            "memorization_score": s["gap_accuracy"],
        }
        self.epoch_memorization.append(out)
        return out

    def analyze_memorization_evolution(self) -> dict[str, Any]:
        """Over the evaluated epochs:

        - ``transition_epoch``: where the accuracy gap closed (stays <= ``gap_close`` to the end after
          having opened >= ``gap_open``): memorization giving way to generalization; None if it did not;
        - ``gap_open_epoch``; ``max_memorization`` and ``max_memorization_epoch``;
          ``final_memorization``; ``memorization_reduction`` (max minus final);
        - ``train_transition_epoch`` / ``test_transition_epoch``: first epoch the accuracy reaches
          ``transition_level`` and stays; ``delay_epochs`` (test minus train: the grokking delay);
        - ``change_points`` (rows: metric, epoch, before, after, jump), ``epochs_tracked``."""
        if not self.callback.steps:
            raise RuntimeError("nothing evaluated yet: call compute_memorization_scores first")
        report = self.callback.report()
        m = report.metrics
        mx, final = m.get("memorization/max_gap"), m.get("memorization/gap_accuracy")
        rows = [
            {**{k: v for k, v in r.items() if k != "step"}, "epoch": r["step"]} for r in report.tables["change_points"]
        ]
        return {
            "transition_epoch": _int_or_none(m.get("memorization/gap_close_step")),
            "gap_open_epoch": _int_or_none(m.get("memorization/gap_open_step")),
            "max_memorization": mx,
            "max_memorization_epoch": _int_or_none(m.get("memorization/max_gap_step")),
            "final_memorization": final,
            "memorization_reduction": None if mx is None or final is None else mx - final,
            "train_transition_epoch": _int_or_none(m.get("transitions/train_accuracy/step")),
            "test_transition_epoch": _int_or_none(m.get("transitions/test_accuracy/step")),
            "delay_epochs": _int_or_none(m.get("transitions/delay_steps")),
            "change_points": rows,
            "epochs_tracked": len(self.callback.steps),
        }

    def plot_memorization(self, save_dir: str | Path | None = None) -> dict:
        """``memorization.png``: train vs test accuracy over epochs with the transitions marked."""
        from modelxray.learning_dynamics.plots import figures

        if not self.callback.steps:
            raise RuntimeError("nothing evaluated yet: call compute_memorization_scores first")
        return _save_figures(figures({"memorization": self.callback.report()}, unit="epoch"), save_dir)

    def save(self, filepath: str | Path) -> tuple[Path, Path]:
        """Write the detector to ``filepath.json`` + ``filepath.npz`` (no pickle)."""
        return _saved(self, filepath, epoch_memorization=self.epoch_memorization)

    @classmethod
    def load(cls, filepath: str | Path) -> MemorizationDetector:
        new, doc = _restored(cls, filepath, MemorizationConfig, MemorizationCallback)
        new.epoch_memorization = doc["epoch_memorization"]
        return new
