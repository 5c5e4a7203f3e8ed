"""Per-example loss, correctness and true-class probability per epoch, from the training forward.

Why a recorder: forgetting and cartography need every tracked example's state at every epoch. The
recorder takes the training step's logits and dataset indices (no second forward pass), scatters
the batch's statistics into per-epoch buffers on the logits' device (no per-example Python loop),
and at the end of an epoch commits them: running statistics are updated in O(examples) and the
history matrix gets one column. Only the first ``track_examples`` dataset positions (or a seeded
random subset) are tracked.

The history stores the loss (float32) and correctness (int8, -1 = not seen that epoch); the
true-class probability is ``exp(-loss)``, the same number the forward gave.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from modelxray.learning.cartography import Cartography, RegionThresholds, cartography, cartography_from_sums
from modelxray.learning.evaluation import per_example_stats
from modelxray.learning.forgetting import ForgettingStats, forgetting_stats


class ExampleRecorder:
    """Tracks ``track_examples`` of ``n_train`` training examples across epochs.

    ``update(logits, indices, labels)`` after a training forward; ``commit(epoch, step)`` at the end
    of an epoch. Running statistics (forgetting events, first-learned column, cartography sums) are
    exact and incremental; ``keep_history`` keeps the full (examples, epochs) matrices for plots
    and for recomputation by the pure functions."""

    def __init__(self, n_train: int, track_examples: int | None = 1000, selection: str = "first", seed: int = 0,
                 keep_history: bool = True, labels: torch.Tensor | np.ndarray | None = None):
        if selection not in ("first", "random"):
            raise ValueError(f"selection must be first or random, got {selection!r}")
        k = n_train if track_examples is None else min(int(track_examples), n_train)
        if selection == "first":
            tracked = np.arange(k, dtype=np.int64)
        else:
            tracked = np.sort(np.random.default_rng(seed).choice(n_train, size=k, replace=False)).astype(np.int64)
        self.n_train = int(n_train)
        self.tracked = tracked  # dataset positions, sorted
        self.labels = None if labels is None else np.asarray(labels)[tracked].astype(np.int64)
        self.keep_history = keep_history
        self._slot_of = torch.full((n_train,), -1, dtype=torch.long)
        self._slot_of[torch.from_numpy(tracked)] = torch.arange(k)
        self._buf_loss: torch.Tensor | None = None
        self._buf_correct: torch.Tensor | None = None
        # running statistics, one entry per tracked example
        self.count = np.zeros(k, np.int64)
        self.sum_p = np.zeros(k, np.float64)
        self.sum_p2 = np.zeros(k, np.float64)
        self.sum_correct = np.zeros(k, np.float64)
        self.events = np.zeros(k, np.int64)
        self.first_learned = np.full(k, -1, np.int64)
        self.last_state = np.full(k, np.nan, np.float64)
        # history (columns = committed epochs)
        self.epochs: list[int] = []
        self.steps: list[int] = []
        self._loss = np.zeros((k, 0), np.float32)
        self._correct = np.zeros((k, 0), np.int8)
        self._last_epoch_loss = np.full(k, np.nan)

    @property
    def n_tracked(self) -> int:
        return len(self.tracked)

    @property
    def n_epochs(self) -> int:
        return len(self.epochs)

    # ---- recording -------------------------------------------------------------------------------
    def update(self, logits: torch.Tensor, indices: torch.Tensor, labels: torch.Tensor) -> None:
        """Record the batch's tracked examples (if an index repeats in one batch, one of its rows is kept).

        Everything stays on the logits' device and nothing synchronises: untracked rows are
        scattered into a spare slot that is never read."""
        dev = logits.device
        if self._buf_loss is None or self._buf_loss.device != dev:
            self._buf_loss = torch.full((self.n_tracked + 1,), float("nan"), device=dev)
            self._buf_correct = torch.full((self.n_tracked + 1,), -1, dtype=torch.int8, device=dev)
            self._slot_dev = self._slot_of.to(dev)
        slots = self._slot_dev[indices.detach().to(dev).long()]
        slots = torch.where(slots >= 0, slots, self.n_tracked)
        loss, correct, _ = per_example_stats(logits, labels)
        self._buf_loss.index_copy_(0, slots, loss.float())
        self._buf_correct.index_copy_(0, slots, correct.to(torch.int8))

    def commit(self, epoch: int, step: int) -> bool:
        """Close an epoch: fold the buffers into the statistics and the history. False if nothing was seen."""
        if self._buf_loss is None:
            return False
        loss = self._buf_loss[:-1].cpu().numpy().astype(np.float64)
        corr_i8 = self._buf_correct[:-1].cpu().numpy().copy()  # a CPU tensor shares memory with .numpy()
        self._buf_loss.fill_(float("nan"))
        self._buf_correct.fill_(-1)
        seen = corr_i8 >= 0
        if not seen.any():
            return False
        c = np.where(seen, corr_i8, np.nan).astype(np.float64)
        p = np.exp(-loss)
        col = len(self.epochs)
        self.events += (seen & (self.last_state == 1.0) & (c == 0.0)).astype(np.int64)
        newly = seen & (c == 1.0) & (self.first_learned < 0)
        self.first_learned[newly] = col
        self.last_state = np.where(seen, c, self.last_state)
        self.count += seen
        self.sum_p += np.where(seen, p, 0.0)
        self.sum_p2 += np.where(seen, p * p, 0.0)
        self.sum_correct += np.where(seen, c, 0.0)
        self._last_epoch_loss = np.where(seen, loss, np.nan)
        self.epochs.append(int(epoch))
        self.steps.append(int(step))
        if self.keep_history:
            self._append(loss.astype(np.float32), corr_i8)
        return True

    def _append(self, loss: np.ndarray, corr: np.ndarray) -> None:
        n = len(self.epochs)
        if n > self._loss.shape[1]:
            cap = max(16, 2 * self._loss.shape[1])
            grow = lambda a, fill: np.concatenate([a, np.full((a.shape[0], cap - a.shape[1]), fill, a.dtype)], 1)  # noqa: E731
            self._loss, self._correct = grow(self._loss, np.nan), grow(self._correct, -1)
        self._loss[:, n - 1] = loss
        self._correct[:, n - 1] = corr

    # ---- views -------------------------------------------------------------------------------------
    def history(self) -> dict[str, np.ndarray]:
        """``loss``, ``p_true`` and ``correct`` (float, NaN = unseen) as (tracked, epochs) matrices."""
        if not self.keep_history:
            raise RuntimeError("this recorder was built with keep_history=False")
        n = len(self.epochs)
        loss = self._loss[:, :n].astype(np.float64)
        corr = self._correct[:, :n]
        return {"loss": loss, "p_true": np.exp(-loss), "correct": np.where(corr >= 0, corr, np.nan).astype(np.float64)}

    def forgetting(self) -> ForgettingStats:
        """From the running statistics (equal to :func:`forgetting_stats` on the history)."""
        ever = self.first_learned >= 0
        return ForgettingStats(self.events.copy(), self.first_learned.copy(), ever, ever & (self.events == 0), ~ever)

    def cartography(self, thresholds: RegionThresholds | None = None) -> Cartography:
        """From the history when kept (exact two-pass std), else from the running sums."""
        if self.keep_history and self.epochs:
            h = self.history()
            return cartography(h["p_true"], h["correct"], thresholds)
        return cartography_from_sums(self.count, self.sum_p, self.sum_p2, self.sum_correct, thresholds)

    def forgetting_from_history(self) -> ForgettingStats:
        return forgetting_stats(self.history()["correct"])

    def last_epoch_mean_loss(self) -> float:
        v = self._last_epoch_loss[~np.isnan(self._last_epoch_loss)]
        return float(v.mean()) if v.size else float("nan")

    def currently_correct_share(self) -> float:
        seen = ~np.isnan(self.last_state)
        return float(self.last_state[seen].mean()) if seen.any() else float("nan")

    # ---- state ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        n = len(self.epochs)
        return {"n_train": self.n_train, "tracked": self.tracked, "labels": self.labels, "keep_history": self.keep_history,
                "count": self.count, "sum_p": self.sum_p, "sum_p2": self.sum_p2, "sum_correct": self.sum_correct,
                "events": self.events, "first_learned": self.first_learned, "last_state": self.last_state,
                "last_epoch_loss": self._last_epoch_loss, "epochs": list(self.epochs), "steps": list(self.steps),
                "history_loss": self._loss[:, :n].copy(), "history_correct": self._correct[:, :n].copy()}

    @classmethod
    def from_state_dict(cls, s: dict[str, Any]) -> "ExampleRecorder":
        r = cls.__new__(cls)
        r.n_train = int(s["n_train"])
        r.tracked = np.asarray(s["tracked"], np.int64)
        r.labels = None if s["labels"] is None else np.asarray(s["labels"], np.int64)
        r.keep_history = bool(s["keep_history"])
        r._slot_of = torch.full((r.n_train,), -1, dtype=torch.long)
        r._slot_of[torch.from_numpy(r.tracked)] = torch.arange(len(r.tracked))
        r._buf_loss = r._buf_correct = None
        for key in ("count", "sum_p", "sum_p2", "sum_correct", "events", "first_learned", "last_state"):
            setattr(r, key, np.array(s[key]))
        r._last_epoch_loss = np.array(s["last_epoch_loss"])
        r.epochs, r.steps = [int(e) for e in s["epochs"]], [int(t) for t in s["steps"]]
        r._loss, r._correct = np.array(s["history_loss"], np.float32), np.array(s["history_correct"], np.int8)
        return r
