"""The array work of the defective digits datasets (``digits_noisy``, ``digits_spurious``): flipped
labels and class-marker pixels. Their configs and the definitions live in ``digits_variants``."""

from __future__ import annotations

import numpy as np
import torch

from modelxray.data.base import ClassificationData

# the pixel that marks each class c of a spurious-feature dataset (a border pixel of an 8x8 digit)
MARKER_PIXELS = (0, 8, 16, 24, 32, 40, 48, 56, 31, 39)


def flip_labels(data: ClassificationData, noise: float, seed: int = 0) -> ClassificationData:
    """A copy of ``data`` with ``round(noise * n_train)`` training labels moved to another class."""
    rng = np.random.default_rng(seed)
    y = data.y_train.clone()
    n = len(y)
    flipped = np.sort(rng.choice(n, size=int(round(noise * n)), replace=False))
    shift = rng.integers(1, data.n_classes, size=len(flipped))  # never 0: always a different class
    y[flipped] = (y[flipped] + torch.from_numpy(shift)) % data.n_classes
    meta = {
        **data.meta,
        "flipped": torch.from_numpy(flipped.astype(np.int64)),
        "clean_labels": data.y_train.clone(),
        "noise": noise,
    }
    return ClassificationData(
        "digits_noisy",
        data.x_train,
        y,
        data.x_test,
        data.y_test,
        data.n_classes,
        data.feature_range,
        data.input_shape,
        meta,
    )


def mark_spurious(
    data: ClassificationData, train_correlation: float, test_correlation: float, value: float, seed: int = 0
) -> ClassificationData:
    """A copy of ``data`` whose images carry a class marker (see ``digits_variants``), and ``meta`` on it."""
    rng = np.random.default_rng(seed)
    x_tr, m_tr = add_markers(data.x_train, data.y_train, train_correlation, value, rng)
    x_te, m_te = add_markers(data.x_test, data.y_test, test_correlation, value, rng)
    meta = {
        **data.meta,
        "marker_pixels": list(MARKER_PIXELS),
        "train_marker": m_tr,
        "test_marker": m_te,
        "train_agreement": float((m_tr == data.y_train).float().mean()),
        "test_agreement": float((m_te == data.y_test).float().mean()) if len(m_te) else float("nan"),
    }
    return ClassificationData(
        "digits_spurious",
        x_tr,
        data.y_train,
        x_te,
        data.y_test,
        data.n_classes,
        data.feature_range,
        data.input_shape,
        meta,
    )


def add_markers(
    x: torch.Tensor, y: torch.Tensor, correlation: float, value: float, rng: np.random.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Images with one marker pixel each (own label's with probability ``correlation``, else a random
    class), and the marked classes."""
    n = len(y)
    own = rng.random(n) < correlation
    marker = np.where(own, y.numpy(), rng.integers(0, 10, size=n)).astype(np.int64)
    out = x.clone()
    pixels = torch.as_tensor(MARKER_PIXELS)[torch.from_numpy(marker)]
    out[:, list(MARKER_PIXELS)] = 0.0
    out[torch.arange(n), pixels] = value
    return out, torch.from_numpy(marker)
