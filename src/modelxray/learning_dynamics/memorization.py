"""Train/test gap over time, when it opens and closes, and how noisy labels get memorized. Pure numpy.

- ``gap_accuracy = train_accuracy - test_accuracy``; ``gap_loss = test_loss - train_loss``
  (both positive when the model does better on what it trained on);
- the gap *opens* at the first evaluation where ``gap_accuracy >= open_level`` (default 0.1) and
  *closes* at the first later evaluation from which ``gap_accuracy <= close_level`` (default 0.05)
  holds to the end: a late close after an open is the signature of grokking;
- with noisy labels (the flipped training positions), the *fitted share* of flipped examples is the
  share the model predicts with their (wrong) training label: memorization of noise. Its overlap
  with cartography's hard region says whether cartography finds the noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class GapEvents:
    open_step: int | None
    close_step: int | None
    max_gap: float
    max_gap_step: int | None


def gap_events(steps, gap, open_level: float = 0.1, close_level: float = 0.05) -> GapEvents:
    """When the accuracy gap opens (first ``>= open_level``) and closes (stays ``<= close_level``
    from some evaluation after the opening to the end)."""
    steps = np.asarray(steps)
    gap = np.asarray(gap, np.float64)
    if gap.size == 0:
        return GapEvents(None, None, float("nan"), None)
    opened = np.flatnonzero(gap >= open_level)
    open_i = int(opened[0]) if opened.size else None
    close_i = None
    if open_i is not None:
        above = np.flatnonzero(gap > close_level)
        last_above = int(above[-1]) if above.size else -1
        if last_above + 1 < len(gap) and last_above + 1 > open_i:
            close_i = last_above + 1
    k = int(np.nanargmax(gap)) if np.isfinite(gap).any() else None
    return GapEvents(
        None if open_i is None else int(steps[open_i]),
        None if close_i is None else int(steps[close_i]),
        float(np.nanmax(gap)) if k is not None else float("nan"),
        None if k is None else int(steps[k]),
    )


def fitted_share(predictions: np.ndarray, labels: np.ndarray, subset: np.ndarray) -> float:
    """Share of ``subset`` positions whose prediction equals their (training) label."""
    subset = np.asarray(subset, np.int64)
    if subset.size == 0:
        return float("nan")
    return float((np.asarray(predictions)[subset] == np.asarray(labels)[subset]).mean())


def region_overlap(
    flipped: np.ndarray, tracked: np.ndarray, region: np.ndarray, name: str = "hard"
) -> dict[str, float]:
    """How the flipped (noisy) examples and cartography's ``name`` region overlap, among tracked examples.

    ``recall``: share of tracked flipped examples in the region; ``precision``: share of the region
    that is flipped; ``jaccard``: intersection over union; ``n_flipped_tracked``."""
    tracked = np.asarray(tracked, np.int64)
    is_flipped = np.isin(tracked, np.asarray(flipped, np.int64))
    in_region = np.asarray(region) == name
    inter = float((is_flipped & in_region).sum())
    union = float((is_flipped | in_region).sum())
    return {
        "recall": inter / is_flipped.sum() if is_flipped.any() else float("nan"),
        "precision": inter / in_region.sum() if in_region.any() else float("nan"),
        "jaccard": inter / union if union else float("nan"),
        "n_flipped_tracked": float(is_flipped.sum()),
    }
