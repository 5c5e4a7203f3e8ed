"""Dataset cartography (Swayamdipta et al. 2020, "Dataset Cartography"), pure numpy.

Per example, over the recorded epochs (NaN = not seen, ignored):

- confidence  = mean of the true-class probability;
- variability = its **population** standard deviation (ddof=0, as the paper's code ``np.std``);
- correctness = fraction of recorded epochs where the prediction was right.

Regions (every example in exactly one; the keys of :class:`RegionThresholds` are config):

- ``ambiguous``: the ``ambiguous_top_share`` (default 0.33) most variable examples: the variability
  cut is the quantile that puts that share in ``ambiguous``, the paper's "top 33% most ambiguous"
  subsets. A model trained from scratch passes every example through low confidence first, so
  most examples exceed any fixed variability and an absolute cut calls nearly all of them
  ambiguous. With ``ambiguous_top_share=None`` the cut is the absolute ``ambiguous_variability``
  (0.2; the largest possible population std of values in [0, 1] is 0.5) instead;
- ``easy``: not ambiguous and confidence >= ``easy_confidence`` (default 0.5);
- ``hard``: not ambiguous and confidence < ``easy_confidence``.

The paper draws the regions by eye on the map (easy-to-learn top left, hard-to-learn bottom left,
ambiguous to the right); fixed thresholds make them reproducible and comparable across runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

REGIONS = ("easy", "ambiguous", "hard")


@dataclass
class RegionThresholds:
    ambiguous_variability: float = 0.2
    easy_confidence: float = 0.5
    ambiguous_top_share: float | None = 0.33  # the most variable share is ambiguous (None: ambiguous_variability)


@dataclass
class Cartography:
    confidence: np.ndarray  # (N,) float64
    variability: np.ndarray  # (N,) float64, population std
    correctness: np.ndarray  # (N,) float64 in [0, 1]
    region: np.ndarray  # (N,) str, one of REGIONS

    def shares(self) -> dict[str, float]:
        n = max(len(self.region), 1)
        return {r: float((self.region == r).sum()) / n for r in REGIONS}


def cartography(p_true: np.ndarray, correct: np.ndarray, thresholds: RegionThresholds | None = None) -> Cartography:
    """Cartography statistics of (examples, epochs) matrices of true-class probability and correctness."""
    p = np.asarray(p_true, dtype=np.float64)
    c = np.asarray(correct, dtype=np.float64)
    if p.shape != c.shape or p.ndim != 2:
        raise ValueError(f"p_true and correct must be (examples, epochs) of one shape, got {p.shape} and {c.shape}")
    with np.errstate(invalid="ignore"), _quiet():
        conf = np.nanmean(p, axis=1) if p.shape[1] else np.full(len(p), np.nan)
        var = np.nanstd(p, axis=1) if p.shape[1] else np.full(len(p), np.nan)
        corr = np.nanmean(c, axis=1) if c.shape[1] else np.full(len(c), np.nan)
    return Cartography(conf, var, corr, assign_regions(conf, var, thresholds))


def cartography_from_sums(
    count: np.ndarray,
    sum_p: np.ndarray,
    sum_p2: np.ndarray,
    sum_correct: np.ndarray,
    thresholds: RegionThresholds | None = None,
) -> Cartography:
    """The same statistics from running sums (what the recorder keeps), without the full history."""
    count = np.asarray(count, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        conf = np.asarray(sum_p, np.float64) / count
        var = np.sqrt(np.maximum(np.asarray(sum_p2, np.float64) / count - conf**2, 0.0))
        corr = np.asarray(sum_correct, np.float64) / count
    return Cartography(conf, var, corr, assign_regions(conf, var, thresholds))


def assign_regions(
    confidence: np.ndarray, variability: np.ndarray, thresholds: RegionThresholds | None = None
) -> np.ndarray:
    """Region name per example (see the module docstring); NaN statistics (never seen) count as hard."""
    t = thresholds or RegionThresholds()
    var = np.nan_to_num(variability, nan=0.0)
    cut = t.ambiguous_variability
    if t.ambiguous_top_share is not None and len(var):
        cut = float(np.quantile(var, 1.0 - t.ambiguous_top_share)) if t.ambiguous_top_share > 0 else np.inf
    ambiguous = var >= cut
    easy = ~ambiguous & (np.nan_to_num(confidence, nan=0.0) >= t.easy_confidence)
    return np.where(ambiguous, "ambiguous", np.where(easy, "easy", "hard")).astype("<U9")


def hard_example_order(
    confidence: np.ndarray, variability: np.ndarray, forgetting_events: np.ndarray | None = None
) -> np.ndarray:
    """Positions sorted hardest first: lowest confidence, then most forgetting events, then lowest
    variability (consistently wrong before erratic)."""
    conf = np.nan_to_num(np.asarray(confidence, np.float64), nan=-1.0)
    var = np.nan_to_num(np.asarray(variability, np.float64), nan=0.0)
    ev = np.zeros(len(conf)) if forgetting_events is None else np.asarray(forgetting_events, np.float64)
    return np.lexsort((var, -ev, conf))


class _quiet:
    """Silence numpy's 'mean of empty slice' warnings for rows never seen."""

    def __enter__(self):
        import warnings

        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)
