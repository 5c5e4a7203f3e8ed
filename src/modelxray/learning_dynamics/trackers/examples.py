"""LearningDynamicsAnalyzer: per-example forgetting and dataset cartography recorded from a user's
batches (``track_batch``) or an in-order pass per epoch, on ExampleDynamicsCallback's recorder."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from modelxray.core.errors import ConfigError
from modelxray.learning_dynamics.callbacks.configs import ExampleDynamicsConfig
from modelxray.learning_dynamics.callbacks.examples import ExampleDynamicsCallback
from modelxray.learning_dynamics.cartography import hard_example_order
from modelxray.learning_dynamics.loaders import (
    batch_pair,
    check_targets,
    dataset_size,
    describe,
    is_sequential,
    logits_of,
)
from modelxray.learning_dynamics.recorder import ExampleRecorder
from modelxray.learning_dynamics.trackers._shared import _config, _restored, _save_figures, _saved
from modelxray.measure.scoring import model_device


@torch.no_grad()
def _eval_logits(model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """The model's logits on ``inputs`` in eval mode (dropout off, batch-norm statistics untouched),
    the model's mode restored."""
    was_training = model.training
    model.eval()
    try:
        return logits_of(model(inputs.to(model_device(model))), "model output").detach()
    finally:
        model.train(was_training)


class LearningDynamicsAnalyzer:
    """Forgetting and dataset cartography of the training examples, recorded batch by batch.

    ``track_batch(model, inputs, targets, batch_indices, epoch, outputs=None)`` records the batch's
    per-example loss and correctness (``batch_indices``: the examples' positions in the training
    dataset). Given ``outputs`` (the logits the loop already computed) it costs no forward; without,
    it runs one no-grad forward in eval mode. ``compute_epoch_statistics(train_loader, model, epoch)``
    closes the epoch; in an epoch without ``track_batch`` calls it records the epoch itself from one
    pass over ``train_loader`` (which must then not shuffle, so positions are known), which is how
    saved checkpoints are replayed. Only the first ``track_examples`` positions are tracked
    (``selection="random"``: a seeded random subset). ``num_classes`` None: the logits' width.
    """

    def __init__(
        self,
        num_classes: int | None = None,
        track_examples: int | None = ExampleDynamicsConfig.track_examples,
        device: Any = None,
        **options: Any,
    ):
        if num_classes is not None and (not isinstance(num_classes, int) or num_classes < 1):
            raise ConfigError("num_classes", f"must be a positive integer or None, got {num_classes!r}")
        self.num_classes = num_classes
        self.device = device
        self.config = _config(
            ExampleDynamicsConfig,
            "LearningDynamicsAnalyzer",
            options,
            ("every_n_epochs", "log_every_n_epochs"),  # every epoch the loop closes is recorded
            track_examples=track_examples,
        )
        self.callback = ExampleDynamicsCallback(self.config)
        self.epoch_stats: list[dict[str, Any]] = []
        self.current_epoch: int | None = None  # the epoch track_batch records into, until it is closed
        self._pending: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # before the size is known
        self._max_position = -1
        self._labels_complete = False

    @property
    def recorder(self) -> ExampleRecorder | None:
        return self.callback.recorder

    # ---- recording ----------------------------------------------------------------------------------
    def track_batch(
        self,
        model: nn.Module,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        batch_indices,
        epoch: int,
        outputs: Any = None,
    ) -> None:
        """Record one batch (see the class docstring). Nothing synchronises with the GPU when
        ``outputs`` are given and the indices are on the CPU."""
        targets = check_targets(targets, None, "targets")
        positions = self._positions(batch_indices, len(targets))
        logits = _eval_logits(model, inputs) if outputs is None else logits_of(outputs).detach()
        if logits.shape[0] != len(targets):
            raise ConfigError("outputs", f"has {logits.shape[0]} rows for a batch of {len(targets)} targets")
        self._check_classes(logits.shape[1])
        if self.current_epoch is not None and int(epoch) != self.current_epoch:
            self._close(None)
        self.current_epoch = int(epoch)
        self._record(logits, positions, targets)

    def _positions(self, batch_indices, n: int) -> torch.Tensor:
        pos = torch.as_tensor(batch_indices)
        if pos.dim() != 1 or pos.dtype.is_floating_point or pos.dtype == torch.bool or len(pos) != n:
            raise ConfigError(
                "batch_indices",
                f"must be the {n} dataset positions of the batch (a 1-D integer tensor), got {describe(pos)}",
            )
        pos = pos.long()
        if pos.device.type != "cpu":
            pos = pos.cpu()
        if n and int(pos.min()) < 0:
            raise ConfigError("batch_indices", f"dataset positions must be >= 0, got {int(pos.min())}")
        return pos

    def _check_classes(self, width: int) -> None:
        if self.num_classes is None:
            self.num_classes = int(width)
        elif width != self.num_classes:
            raise ConfigError("num_classes", f"is {self.num_classes} but the model gives {width} logits")

    def _record(self, logits: torch.Tensor, pos: torch.Tensor, targets: torch.Tensor) -> None:
        r = self.recorder
        if len(pos):
            self._max_position = max(self._max_position, int(pos.max()))
        if r is None:  # first epoch: kept until the dataset's size is known
            c = self.config
            if c.selection == "first" and c.track_examples is not None:
                keep = pos < c.track_examples
                if not bool(keep.all()):
                    logits, pos, targets = logits[keep.to(logits.device)], pos[keep], targets[keep.to(targets.device)]
            self._pending.append((logits, pos, targets))
            return
        if len(pos) and int(pos.max()) >= r.n_train:
            keep = pos < r.n_train
            logits, pos, targets = logits[keep.to(logits.device)], pos[keep], targets[keep.to(targets.device)]
        r.update(logits, pos, targets)
        if not self._labels_complete:
            self._fill_labels(pos, targets)

    def _fill_labels(self, pos: torch.Tensor, targets: torch.Tensor) -> None:
        """Labels of tracked examples first seen after the first epoch (the hard-examples table)."""
        r = self.recorder
        slot = np.searchsorted(r.tracked, pos.numpy())
        ok = (slot < r.n_tracked) & (r.tracked[np.minimum(slot, r.n_tracked - 1)] == pos.numpy())
        r.labels[slot[ok]] = targets.detach().cpu().numpy()[ok]
        self._labels_complete = bool((r.labels >= 0).all())

    def _build_recorder(self, train_loader) -> None:
        """Size the recorder from the dataset (or the largest position seen) and replay the first epoch."""
        n = dataset_size(train_loader) if train_loader is not None else None
        if n is None:
            n = self._max_position + 1
        elif self._max_position >= n:
            raise ConfigError(
                "batch_indices", f"position {self._max_position} is beyond the {n} examples of train_loader's dataset"
            )
        c = self.config
        labels = np.full(n, -1, np.int64)
        for _, pos, targets in self._pending:
            labels[pos.numpy()] = targets.detach().cpu().numpy()
        self.callback.recorder = ExampleRecorder(n, c.track_examples, c.selection, c.seed, c.keep_history, labels)
        for logits, pos, targets in self._pending:
            self.recorder.update(logits, pos, targets)
        self._pending = []
        self._labels_complete = bool((self.recorder.labels >= 0).all())

    def _close(self, train_loader) -> None:
        """Commit the open epoch (its label: the ``epoch`` given to track_batch)."""
        if self.recorder is None:
            self._build_recorder(train_loader)
        self.recorder.commit(self.current_epoch, self.current_epoch)
        self.callback.epochs_seen += 1
        self.current_epoch = None

    def _record_pass(self, train_loader, model: nn.Module, epoch: int) -> None:
        """Record an epoch from one no-grad pass over an unshuffled loader (positions in order)."""
        if train_loader is None or not is_sequential(train_loader):
            what = "is None" if train_loader is None else "shuffles"
            raise ConfigError(
                "train_loader",
                f"{what}, and no track_batch call recorded epoch {epoch}: call track_batch for each batch, "
                "or pass a loader without shuffling so that dataset positions are known",
            )
        start = 0
        with torch.random.fork_rng(devices=[]):
            for batch in train_loader:
                inputs, targets = batch_pair(batch, "train_loader")
                logits = _eval_logits(model, inputs)
                self._check_classes(logits.shape[1])
                self._record(logits, torch.arange(start, start + len(targets)), targets)
                start += len(targets)
        if not start:
            raise ConfigError("train_loader", "yielded no batch")
        self.current_epoch = int(epoch)

    def compute_epoch_statistics(self, train_loader, model: nn.Module, epoch: int) -> dict[str, Any]:
        """Close ``epoch``; returns its summary: ``epoch``, ``accuracy`` (share of the tracked examples
        correct at their latest record), ``avg_loss`` (their mean loss this epoch),
        ``class_accuracies`` ({class: accuracy}) and the callback's ``examples/*`` and
        ``cartography/*`` metrics."""
        if self.current_epoch is None:
            if self.recorder is None or int(epoch) not in self.recorder.epochs:
                self._record_pass(train_loader, model, epoch)
                self._close(train_loader)
        elif int(epoch) != self.current_epoch:
            raise ConfigError("epoch", f"is {epoch}, but track_batch recorded epoch {self.current_epoch}")
        else:
            self._close(train_loader)
        live = self.callback.live_metrics()
        stat = {
            "epoch": int(epoch),
            "accuracy": live["examples/correct_share"],
            "avg_loss": live["examples/mean_loss"],
            "class_accuracies": self._class_accuracies(),
        }
        self.epoch_stats.append(stat)
        return {**stat, **live}

    def _class_accuracies(self) -> dict[int, float]:
        r = self.recorder
        state, labels = r.last_state, r.labels
        k = self.num_classes or 0
        if labels.size and labels.max() >= k:
            raise ConfigError("num_classes", f"is {k} but a label is {int(labels.max())}")
        seen = ~np.isnan(state) & (labels >= 0)
        n = np.bincount(labels[seen], minlength=k)
        right = np.bincount(labels[seen], weights=state[seen], minlength=k)
        with np.errstate(invalid="ignore"):
            acc = right / n
        return {c: float(acc[c]) for c in range(k)}

    # ---- results ----------------------------------------------------------------------------------------
    def analyze_learning_patterns(self) -> dict[str, Any]:
        """Per-example patterns over the recorded epochs, by dataset position:

        - ``hard_examples`` (cartography's hard region, hardest first), ``ambiguous_examples``,
          ``easy_examples``; ``hard_examples_table`` (ranked rows with label, confidence,
          variability, forgetting events);
        - ``forgetting_statistics``: ``mean``, ``std``, ``max`` forgetting events per example,
          ``examples_with_forgetting``, ``total_events``, ``unforgettable``, ``never_learned``;
        - ``learning_speed_statistics``: ``mean_first_learned_epoch``, ``std_first_learned_epoch``,
          ``learned_examples``; ``confidence_statistics``: ``mean_confidence``, ``mean_variability``,
          ``mean_correctness``; ``region_shares``;
        - ``total_examples_tracked``, ``epochs_recorded``, ``metrics`` (the callback's report) and
          ``insights``."""
        r = self.recorder
        if r is None or not r.epochs:
            raise RuntimeError("nothing recorded yet: call track_batch and compute_epoch_statistics first")
        report = self.callback.report()
        c, f = self.callback.cartography(), r.forgetting()
        order = hard_example_order(c.confidence, c.variability, f.events)
        in_region = lambda name: [int(r.tracked[i]) for i in order if c.region[i] == name]  # noqa: E731
        epochs = np.asarray(r.epochs)
        learned = epochs[f.first_learned[f.first_learned >= 0]]
        ev = f.events
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            conf = {
                "mean_confidence": float(np.nanmean(c.confidence)),
                "mean_variability": float(np.nanmean(c.variability)),
                "mean_correctness": float(np.nanmean(c.correctness)),
            }
        return {
            "hard_examples": in_region("hard"),
            "ambiguous_examples": sorted(in_region("ambiguous")),
            "easy_examples": sorted(in_region("easy")),
            "hard_examples_table": report.tables.get("hard_examples", []),
            "forgetting_statistics": {
                "mean": float(ev.mean()) if ev.size else 0.0,
                "std": float(ev.std()) if ev.size else 0.0,
                "max": int(ev.max()) if ev.size else 0,
                "examples_with_forgetting": int((ev > 0).sum()),
                "total_events": int(ev.sum()),
                "unforgettable": int(f.unforgettable.sum()),
                "never_learned": int(f.never_learned.sum()),
            },
            "learning_speed_statistics": {
                "mean_first_learned_epoch": float(learned.mean()) if learned.size else None,
                "std_first_learned_epoch": float(learned.std()) if learned.size else None,
                "learned_examples": int(learned.size),
            },
            "confidence_statistics": conf,
            "region_shares": c.shares(),
            "total_examples_tracked": r.n_tracked,
            "epochs_recorded": r.n_epochs,
            "metrics": report.metrics,
            "insights": report.insights,
        }

    def plot_learning_dynamics(self, save_dir: str | Path | None = None) -> dict:
        """``cartography_map.png``, ``forgetting_histogram.png``, ``learning_curves_by_region.png``
        written to ``save_dir`` (returns ``{name: path}``; without ``save_dir``, ``{name: Figure}``)."""
        from modelxray.learning_dynamics.plots import figures

        if self.recorder is None or not self.recorder.epochs:
            raise RuntimeError("nothing recorded yet: call track_batch and compute_epoch_statistics first")
        return _save_figures(figures({"example_dynamics": self.callback.report()}, unit="epoch"), save_dir)

    # ---- state --------------------------------------------------------------------------------------------
    def save(self, filepath: str | Path) -> tuple[Path, Path]:
        """Write the analyzer to ``filepath.json`` + ``filepath.npz`` (no pickle). An epoch still open
        (track_batch calls not yet closed by compute_epoch_statistics) is not saved."""
        if self.current_epoch is not None:
            warnings.warn(f"epoch {self.current_epoch} is still open and is not saved", stacklevel=2)
        s, k = self.epoch_stats, self.num_classes or 0
        return _saved(
            self,
            filepath,
            epoch_stats={
                "epoch": np.array([x["epoch"] for x in s], np.int64),
                "accuracy": np.array([x["accuracy"] for x in s], np.float64),
                "avg_loss": np.array([x["avg_loss"] for x in s], np.float64),
                "class_accuracies": np.array(
                    [[x["class_accuracies"][c] for c in range(k)] for x in s], np.float64
                ).reshape(len(s), k),
            },
        )

    @classmethod
    def load(cls, filepath: str | Path) -> LearningDynamicsAnalyzer:
        """An analyzer saved by :meth:`save`, ready to record more epochs or to analyze."""
        new, doc = _restored(cls, filepath, ExampleDynamicsConfig, ExampleDynamicsCallback)
        if new.recorder is not None:
            new.callback.epochs_seen = new.recorder.n_epochs
            new._labels_complete = bool((new.recorder.labels >= 0).all())
        s = doc["epoch_stats"]
        new.epoch_stats = [
            {
                "epoch": int(e),
                "accuracy": float(a),
                "avg_loss": float(loss),
                "class_accuracies": {c: float(v) for c, v in enumerate(row)},
            }
            for e, a, loss, row in zip(s["epoch"], s["accuracy"], s["avg_loss"], s["class_accuracies"])
        ]
        return new
