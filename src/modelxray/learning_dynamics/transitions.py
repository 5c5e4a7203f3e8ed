"""Phase transitions in any logged series: change points (``ruptures``) and level-crossing steps.

Change points: binary segmentation (default; greedy, finds the largest change first, ~20 ms for
4,000 points) or PELT (the exact optimum of the same penalised cost, ~40x slower) from ``ruptures``
(Truong et al. 2020) on the least-squares cost ``l2`` (a change in mean). The penalty per change point is

    penalty = max(penalty_scale * sigma² * log(n),  min_gain * SST)

The first term is BIC-like for Gaussian noise (``penalty_scale`` defaults to 2), with sigma the
noise level estimated robustly from first differences, ``median(|diff - median(diff)|) / 0.6745 /
sqrt(2)``. The second says a change point must explain at least ``min_gain`` (default 5%) of the
series' total sum of squares around its mean (SST): without it a smooth, noise-free ramp (an
accuracy curve) would be cut into dozens of tiny steps; with it a sigmoid-shaped rise gives one
change point near its midpoint. Candidate positions are every ``jump``-th point
(``ceil(n / max_candidates)``, at least 1) with segments of at least ``min_size`` points. Each
change point is reported with its step, the means before and after (over the adjacent segments) and
the jump; the ``max_points`` largest jumps are kept.

Transition step: for an accuracy-like series, the first step from which the series is ``>= level``
(default 0.95) up to the end ("crosses and stays"); ``above=False`` for loss-like series
(``<= level``). This is the robust headline number (e.g. the grokking step of test accuracy).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class ChangePoint:
    metric: str
    step: int
    index: int  # position in the series of the first point after the change
    before: float  # mean of the segment before
    after: float  # mean of the segment after
    jump: float  # after - before

    def as_row(self) -> dict:
        return asdict(self)


def noise_sigma(values: np.ndarray) -> float:
    v = np.asarray(values, np.float64)
    if v.size < 3:
        return 0.0
    d = np.diff(v)
    return float(np.median(np.abs(d - np.median(d))) / 0.6745 / math.sqrt(2))


def change_points(
    values,
    steps=None,
    metric: str = "series",
    method: str = "binseg",
    penalty: float | None = None,
    penalty_scale: float = 2.0,
    min_gain: float = 0.05,
    min_size: int = 2,
    max_candidates: int = 500,
    max_points: int | None = 5,
) -> list[ChangePoint]:
    """Change points of a 1-D series (NaNs dropped), largest jumps first (at most ``max_points``)."""
    import ruptures as rpt

    v = np.asarray(values, np.float64)
    s = np.arange(len(v)) if steps is None else np.asarray(steps)
    keep = np.isfinite(v)
    v, s = v[keep], s[keep]
    n = len(v)
    if n < 2 * min_size:
        return []
    if penalty is None:
        span = float(v.max() - v.min())
        if span == 0.0:
            return []
        sst = float(((v - v.mean()) ** 2).sum())
        penalty = max(penalty_scale * noise_sigma(v) ** 2 * math.log(n), min_gain * sst)
    jump = max(1, math.ceil(n / max_candidates))
    if method == "pelt":
        algo = rpt.Pelt(model="l2", min_size=min_size, jump=jump)
    elif method == "binseg":
        algo = rpt.Binseg(model="l2", min_size=min_size, jump=jump)
    else:
        raise ValueError(f"method must be pelt or binseg, got {method!r}")
    ends = algo.fit(v.reshape(-1, 1)).predict(pen=penalty)
    bounds = [0, *ends]
    found = []
    for i in range(1, len(bounds) - 1):
        a, b, c = bounds[i - 1], bounds[i], bounds[i + 1]
        before, after = float(v[a:b].mean()), float(v[b:c].mean())
        found.append(ChangePoint(metric, int(s[b]), int(b), before, after, after - before))
    found.sort(key=lambda cp: -abs(cp.jump))
    return found if max_points is None else found[:max_points]


def transition_step(values, steps=None, level: float = 0.95, above: bool = True) -> int | None:
    """First step from which the series stays ``>= level`` (``<= level`` if not ``above``) to the end; None if never."""
    v = np.asarray(values, np.float64)
    s = np.arange(len(v)) if steps is None else np.asarray(steps)
    ok = v >= level if above else v <= level
    if v.size == 0 or not ok[-1]:
        return None
    bad = np.flatnonzero(~ok)
    return int(s[bad[-1] + 1]) if bad.size else int(s[0])


def detect_transitions(
    series: dict[str, tuple], level: float = 0.95, levels: dict[str, float] | None = None, **change_point_kwargs
) -> dict:
    """Change points and (for series named like accuracies) transition steps of many series at once.

    ``series``: ``{metric: (steps, values)}``. Returns ``{"metrics": {...}, "change_points": rows}``
    with metrics ``transitions/<metric>/step`` (level crossing: for the series in ``levels`` at
    their level, or when ``levels`` is None for names containing ``acc`` at ``level``),
    ``transitions/<metric>/n_change_points`` and ``transitions/<metric>/largest_change_step``."""
    metrics: dict[str, float] = {}
    rows: list[dict] = []
    for name, (steps, values) in series.items():
        cps = change_points(values, steps, metric=name, **change_point_kwargs)
        rows += [cp.as_row() for cp in cps]
        metrics[f"transitions/{name}/n_change_points"] = float(len(cps))
        if cps:
            metrics[f"transitions/{name}/largest_change_step"] = float(cps[0].step)
        lv = levels.get(name) if levels is not None else (level if "acc" in name else None)
        if lv is not None:
            t = transition_step(values, steps, lv)
            if t is not None:
                metrics[f"transitions/{name}/step"] = float(t)
    return {"metrics": metrics, "change_points": rows}
