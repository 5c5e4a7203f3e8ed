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
    x = np.asarray(x, np.float64).reshape(len(x), -1)
    y = np.asarray(y, np.float64).reshape(len(y), -1)
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"CKA needs the same examples on both sides, got {x.shape[0]} and {y.shape[0]} rows")
    x = x - x.mean(axis=0, keepdims=True)
    y = y - y.mean(axis=0, keepdims=True)
    n, p1, p2 = x.shape[0], x.shape[1], y.shape[1]
    if p1 * p2 + p1 * p1 + p2 * p2 <= 3 * n * n:
        num = np.linalg.norm(y.T @ x) ** 2
        den = np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)
    else:
        k, l = x @ x.T, y @ y.T
        num = float((k * l).sum())
        den = np.linalg.norm(k) * np.linalg.norm(l)
    return float(num / den) if den > 0 else float("nan")
