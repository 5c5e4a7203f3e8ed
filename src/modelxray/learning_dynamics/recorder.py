"""Per-example loss, correctness and true-class probability per epoch, from the training forward.

Why a recorder: forgetting and cartography need every tracked example's state at every epoch. The
recorder takes the training step's logits, dataset indices and, when the loop has them, the
forward's own per-example losses (no second forward pass, not even a second cross-entropy), and
scatters the batch's statistics into a block of per-epoch rows on the logits' device (no
per-example Python loop, no host sync per step). ``commit`` closes an epoch by moving to the next
row: it costs nothing. The block is folded into the running statistics and the history, vectorised
over its epochs, when it is full or when a result is read. Only the first ``track_examples``
dataset positions (or a seeded random subset) are tracked.

The history stores the loss (float32) and correctness (int8, -1 = not seen that epoch); the
true-class probability is ``exp(-loss)``, the same number the forward gave.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from modelxray.learning_dynamics.cartography import Cartography, RegionThresholds, cartography, cartography_from_sums
from modelxray.learning_dynamics.forgetting import ForgettingStats, forward_fill

BLOCK_EPOCHS = 32  # epochs buffered on the device between folds (one host transfer per block)
_RUNNING = ("count", "sum_p", "sum_p2", "sum_correct", "events", "first_learned", "last_state")


class PerIndices:
    """``fn()`` of a batch's indices tensor, recomputed only when another (or an in-place modified)
    indices tensor comes: a full-batch loop passes the same tensor every step."""

    def __init__(self):
        self._key: tuple | None = None
        self._value: Any = None

    def get(self, indices: torch.Tensor, fn):
        if self._key is None or self._key[0] is not indices or self._key[1] != indices._version:
            self._value = fn()
            self._key = (indices, indices._version)
        return self._value


class ExampleRecorder:
    """Tracks ``track_examples`` of ``n_train`` training examples across epochs.

    ``update(logits, indices, labels, loss=None)`` after a training forward; ``commit(epoch, step)``
    at the end of an epoch. Running statistics (forgetting events, first-learned column, cartography
    sums) are exact and incremental; ``keep_history`` keeps the full (examples, epochs) matrices for
    plots and for recomputation by the pure functions."""

    def __init__(
        self,
        n_train: int,
        track_examples: int | None = 1000,
        selection: str = "first",
        seed: int = 0,
        keep_history: bool = True,
        labels: torch.Tensor | np.ndarray | None = None,
    ):
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
        self._init_buffers()
        # running statistics, one entry per tracked example (read them through the properties)
        self._count = np.zeros(k, np.int64)
        self._sum_p = np.zeros(k, np.float64)
        self._sum_p2 = np.zeros(k, np.float64)
        self._sum_correct = np.zeros(k, np.float64)
        self._events = np.zeros(k, np.int64)
        self._first_learned = np.full(k, -1, np.int64)
        self._last_state = np.full(k, np.nan, np.float64)
        # history (columns = committed epochs)
        self.epochs: list[int] = []
        self.steps: list[int] = []
        self._loss = np.zeros((k, 0), np.float32)
        self._correct = np.zeros((k, 0), np.int8)
        self._last_epoch_loss = np.full(k, np.nan)

    def _init_buffers(self) -> None:
        self._slot_of = torch.full((self.n_train,), -1, dtype=torch.long)
        self._slot_of[torch.from_numpy(self.tracked)] = torch.arange(len(self.tracked))
        self._slot_of[self._slot_of < 0] = len(self.tracked)  # untracked rows go to a spare column never read
        self._buf_loss: torch.Tensor | None = None  # (BLOCK_EPOCHS, tracked + 1) on the logits' device
        self._buf_correct: torch.Tensor | None = None
        self._row = 0  # the block row the running epoch writes
        self._dirty = False  # update() was called since the last commit
        self._folded = 0  # committed epochs already folded into the statistics
        self._slots = PerIndices()  # block columns of the batch's rows

    @property
    def n_tracked(self) -> int:
        return len(self.tracked)

    @property
    def n_epochs(self) -> int:
        return len(self.epochs)

    # ---- recording -------------------------------------------------------------------------------
    def update(
        self, logits: torch.Tensor, indices: torch.Tensor, labels: torch.Tensor, loss: torch.Tensor | None = None
    ) -> None:
        """Record the batch's tracked examples (if an index repeats in one batch, one of its rows is kept).

        ``loss``: the forward's per-example cross-entropy of these rows, if the loop computed it
        (then only the argmax is computed here). Everything stays on the logits' device and nothing
        synchronises."""
        dev = logits.device
        if self._buf_loss is None or self._buf_loss.device != dev:
            self._fold()
            self._buf_loss = torch.full((BLOCK_EPOCHS, self.n_tracked + 1), float("nan"), device=dev)
            self._buf_correct = torch.full((BLOCK_EPOCHS, self.n_tracked + 1), -1, dtype=torch.int8, device=dev)
            self._slot_dev = self._slot_of.to(dev)
            self._slots = PerIndices()
        slots = self._slots.get(indices, lambda: self._slot_dev[indices.detach().to(dev).long()])
        lg = logits.detach()
        if lg.dtype not in (torch.float32, torch.float64):
            lg = lg.float()
        labels = labels.to(dev)
        if loss is None:
            loss = F.cross_entropy(lg, labels.long(), reduction="none")
        correct = lg.max(dim=-1).indices == labels  # argmax (first maximum), at half argmax's cost on CPU
        self._buf_loss[self._row].index_copy_(0, slots, loss.detach().to(self._buf_loss.dtype))
        self._buf_correct[self._row].index_copy_(0, slots, correct.to(torch.int8))
        self._dirty = True

    def commit(self, epoch: int, step: int) -> bool:
        """Close an epoch (False if ``update`` was not called since the last commit). An epoch whose
        batches held no tracked example is committed as unseen (NaN) for every example."""
        if not self._dirty:
            return False
        self._dirty = False
        self.epochs.append(int(epoch))
        self.steps.append(int(step))
        self._row += 1
        if self._row == BLOCK_EPOCHS:
            self._fold()
        return True

    def _fold(self) -> None:
        """Fold the committed rows of the block into the running statistics and the history."""
        m = self._row
        if m == 0:
            return
        loss = self._buf_loss[:m, :-1].cpu().numpy().T.astype(np.float64)  # (tracked, m)
        corr_i8 = self._buf_correct[:m, :-1].cpu().numpy().T.copy()  # a CPU tensor shares memory with .numpy()
        self._buf_loss[:m].fill_(float("nan"))
        self._buf_correct[:m].fill_(-1)
        if self._dirty:  # a result read mid-epoch: the running epoch's row moves to the top of the block
            self._buf_loss[0].copy_(self._buf_loss[m])
            self._buf_correct[0].copy_(self._buf_correct[m])
            self._buf_loss[m].fill_(float("nan"))
            self._buf_correct[m].fill_(-1)
        self._row = 0
        seen = corr_i8 >= 0
        p = np.exp(-loss)
        with_last = np.concatenate([self._last_state[:, None], corr_i8], axis=1).astype(np.float64)
        if seen.all():  # every example seen every epoch (full batch, or whole epochs): no gaps to fill
            filled = with_last
        else:
            with_last[:, 1:][~seen] = np.nan
            filled = forward_fill(with_last)
            p = np.where(seen, p, 0.0)
        c = with_last[:, 1:]  # 1, 0 or NaN (unseen)
        self._events += ((filled[:, :-1] == 1.0) & (c == 0.0)).sum(axis=1)
        is_correct = c == 1.0
        newly = is_correct.any(axis=1) & (self._first_learned < 0)
        self._first_learned[newly] = self._folded + is_correct[newly].argmax(axis=1)
        self._last_state = filled[:, -1].copy()
        self._count += seen.sum(axis=1)
        self._sum_p += p.sum(axis=1)
        self._sum_p2 += (p * p).sum(axis=1)
        self._sum_correct += is_correct.sum(axis=1)
        self._last_epoch_loss = np.where(seen[:, -1], loss[:, -1], np.nan)
        self._folded += m
        if self.keep_history:
            self._append(loss.astype(np.float32), corr_i8)

    def _append(self, loss: np.ndarray, corr: np.ndarray) -> None:
        """Add the columns ``loss``/``corr`` (tracked, m) after the ``_folded - m`` kept ones."""
        end = self._folded
        if end > self._loss.shape[1]:
            cap = max(16, 2 * self._loss.shape[1], end)
            grow = lambda a, fill: np.concatenate([a, np.full((a.shape[0], cap - a.shape[1]), fill, a.dtype)], 1)  # noqa: E731
            self._loss, self._correct = grow(self._loss, np.nan), grow(self._correct, -1)
        self._loss[:, end - loss.shape[1] : end] = loss
        self._correct[:, end - loss.shape[1] : end] = corr

    def _stat(name: str):  # noqa: N805 - a property factory used in the class body
        def get(self) -> np.ndarray:
            self._fold()
            return getattr(self, "_" + name)

        get.__name__ = name
        return property(get, doc=f"Running statistic ``{name}`` per tracked example (folds pending epochs).")

    count, sum_p, sum_p2, sum_correct = _stat("count"), _stat("sum_p"), _stat("sum_p2"), _stat("sum_correct")
    events, first_learned, last_state = _stat("events"), _stat("first_learned"), _stat("last_state")
    del _stat

    # ---- views -------------------------------------------------------------------------------------
    def history(self) -> dict[str, np.ndarray]:
        """``loss``, ``p_true`` and ``correct`` (float, NaN = unseen) as (tracked, epochs) matrices."""
        if not self.keep_history:
            raise RuntimeError("this recorder was built with keep_history=False")
        self._fold()
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

    def last_epoch_mean_loss(self) -> float:
        self._fold()
        v = self._last_epoch_loss[~np.isnan(self._last_epoch_loss)]
        return float(v.mean()) if v.size else float("nan")

    def currently_correct_share(self) -> float:
        seen = ~np.isnan(self.last_state)
        return float(self.last_state[seen].mean()) if seen.any() else float("nan")

    # ---- state ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        self._fold()
        n = len(self.epochs)
        return {
            "n_train": self.n_train,
            "tracked": self.tracked,
            "labels": self.labels,
            "keep_history": self.keep_history,
            **{key: getattr(self, "_" + key).copy() for key in _RUNNING},
            "last_epoch_loss": self._last_epoch_loss,
            "epochs": list(self.epochs),
            "steps": list(self.steps),
            "history_loss": self._loss[:, :n].copy(),
            "history_correct": self._correct[:, :n].copy(),
        }

    @classmethod
    def from_state_dict(cls, s: dict[str, Any]) -> ExampleRecorder:
        r = cls.__new__(cls)
        r.n_train = int(s["n_train"])
        r.tracked = np.asarray(s["tracked"], np.int64)
        r.labels = None if s["labels"] is None else np.asarray(s["labels"], np.int64)
        r.keep_history = bool(s["keep_history"])
        r._init_buffers()
        for key in _RUNNING:
            setattr(r, "_" + key, np.array(s[key]))
        r._last_epoch_loss = np.array(s["last_epoch_loss"])
        r.epochs, r.steps = [int(e) for e in s["epochs"]], [int(t) for t in s["steps"]]
        r._folded = len(r.epochs)
        r._loss, r._correct = np.array(s["history_loss"], np.float32), np.array(s["history_correct"], np.int8)
        return r
