"""Forgetting statistics (Toneva et al. 2019, "An empirical study of example forgetting"), pure numpy.

Input is a correctness matrix ``correct`` of shape (examples, recorded epochs) with 1 (correct),
0 (wrong) or NaN (not seen that epoch). An unseen epoch keeps the example's last state, so an event
is only counted where the example was seen.

- forgetting event at epoch e: correct at the previous epoch it was seen, wrong at e;
- learning event: wrong (or first seen) -> correct;
- first-learned epoch: the first recorded epoch it is correct (-1 if never);
- unforgettable: correct at least once and never forgotten (Toneva et al. also count examples that
  are never learned as "forgotten infinitely often"; here they are reported separately);
- never learned: never correct in any recorded epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class ForgettingStats:
    events: np.ndarray  # (N,) int64 forgetting events per example
    first_learned: np.ndarray  # (N,) int64 column index of the first correct epoch, -1 if never
    ever_correct: np.ndarray  # (N,) bool
    unforgettable: np.ndarray  # (N,) bool: ever correct and no forgetting event
    never_learned: np.ndarray  # (N,) bool

    @property
    def total_events(self) -> int:
        return int(self.events.sum())


def forward_fill(a: np.ndarray) -> np.ndarray:
    """NaNs along axis 1 replaced by the last non-NaN value of the row (leading NaNs stay NaN)."""
    a = np.asarray(a, dtype=np.float64)
    if a.size == 0:
        return a.copy()
    seen = ~np.isnan(a)
    idx = np.where(seen, np.arange(a.shape[1])[None, :], 0)
    np.maximum.accumulate(idx, axis=1, out=idx)
    return a[np.arange(a.shape[0])[:, None], idx]


def forgetting_stats(correct: np.ndarray) -> ForgettingStats:
    """Forgetting events, first-learned epoch, unforgettable and never-learned examples of ``correct``."""
    c = np.asarray(correct, dtype=np.float64)
    if c.ndim != 2:
        raise ValueError(f"correct must be (examples, epochs), got shape {c.shape}")
    n, e = c.shape
    seen = ~np.isnan(c)
    filled = forward_fill(c)
    prev = np.concatenate([np.full((n, 1), np.nan), filled[:, :-1]], axis=1) if e else filled
    events = (seen & (prev == 1.0) & (c == 0.0)).sum(axis=1).astype(np.int64)
    is_correct = c == 1.0
    ever = is_correct.any(axis=1)
    first = np.where(ever, is_correct.argmax(axis=1), -1).astype(np.int64)
    return ForgettingStats(events, first, ever, ever & (events == 0), ~ever)


def forgetting_histogram(events: np.ndarray, never_learned: np.ndarray | None = None) -> list[dict]:
    """Rows ``{"forgetting_events": k, "examples": count}``; never-learned examples in their own row
    (``"never learned"``) rather than counted as 0 events."""
    events = np.asarray(events)
    mask = np.ones(len(events), bool) if never_learned is None else ~np.asarray(never_learned, bool)
    counts = np.bincount(events[mask], minlength=1) if mask.any() else np.zeros(1, np.int64)
    rows: list[dict] = [{"forgetting_events": int(k), "examples": int(v)} for k, v in enumerate(counts)]
    if never_learned is not None:
        rows.append({"forgetting_events": "never learned", "examples": int(np.asarray(never_learned).sum())})
    return rows
