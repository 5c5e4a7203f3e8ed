"""Linear centered kernel alignment (Kornblith et al. 2019, "Similarity of Neural Network
Representations Revisited").

For representations X (n, p1) and Y (n, p2) of the same n inputs, with columns centered,

    CKA(X, Y) = ||Yᵀ X||_F² / (||Xᵀ X||_F · ||Yᵀ Y||_F)

which equals the normalised HSIC of the linear Gram matrices X Xᵀ and Y Yᵀ. It is 1 for identical
representations and invariant to orthogonal transforms and isotropic scaling of either side (not to
arbitrary invertible linear maps). Computed in float64, in feature space or Gram space, whichever
is smaller.
"""

from __future__ import annotations

import numpy as np


def linear_cka(x, y) -> float:
    """Linear CKA between two (n, features) representations of the same n examples (NaN if one is constant)."""
    x, y = centered(x), centered(y)
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"CKA needs the same examples on both sides, got {x.shape[0]} and {y.shape[0]} rows")
    return centered_cka(x, y)


def centered(x) -> np.ndarray:
    """``x`` as (n, features) float64 with every column centered: what :func:`centered_cka` takes."""
    x = np.asarray(x, np.float64).reshape(len(x), -1)
    return x - x.mean(axis=0, keepdims=True)


def gram_space(n: int, p1: int, p2: int) -> bool:
    """Whether the CKA of (n, p1) and (n, p2) representations is cheaper from the (n, n) Gram
    matrices than from the (p, p) feature products."""
    return p1 * p2 + p1 * p1 + p2 * p2 > 3 * n * n


def self_similarity(x: np.ndarray, gram: bool) -> float:
    """``||xᵀx||_F`` (feature space) or ``||x xᵀ||_F`` (Gram space) of a centered ``x``: the factor
    of the CKA's denominator that depends on one side only, so a caller comparing one representation
    with several others computes it once."""
    if gram:
        return float(np.linalg.norm(x @ x.T))
    return float(np.linalg.norm(x.T @ x))


def centered_cka(x: np.ndarray, y: np.ndarray, x_self: float | None = None, y_self: float | None = None) -> float:
    """:func:`linear_cka` of two :func:`centered` representations; ``x_self`` / ``y_self``: their
    :func:`self_similarity` in the space :func:`gram_space` picks, if known (the same numbers)."""
    n, p1, p2 = x.shape[0], x.shape[1], y.shape[1]
    if gram_space(n, p1, p2):
        k, l = x @ x.T, y @ y.T
        num = float((k * l).sum())
        x_self = float(np.linalg.norm(k)) if x_self is None else x_self
        y_self = float(np.linalg.norm(l)) if y_self is None else y_self
    else:
        num = np.linalg.norm(y.T @ x) ** 2
        x_self = self_similarity(x, False) if x_self is None else x_self
        y_self = self_similarity(y, False) if y_self is None else y_self
    den = x_self * y_self
    return float(num / den) if den > 0 else float("nan")
