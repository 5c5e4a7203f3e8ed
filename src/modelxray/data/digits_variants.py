"""Digits with a known defect, for studying memorization and shortcut learning (offline, instant).

``digits_noisy``: the ``digits`` split with a share ``noise`` of the *training* labels replaced by a
different class chosen uniformly at random (seeded); the test labels stay clean. ``meta["flipped"]``
holds the flipped training positions (sorted int64 tensor) and ``meta["clean_labels"]`` the original
training labels.

``digits_spurious``: a shortcut feature. Ten border pixels that are blank in over 99% of the digits
images (the left column, pixel indices 0, 8, ..., 56, and pixels 31 and 39 on the right edge) become
class markers: marker pixel ``MARKER_PIXELS[c]`` is set to ``marker_value`` for an image marked as
class c. In the train split an image is marked with its own label with probability
``train_correlation`` (else with a uniformly random class); in the test split with probability
``test_correlation`` (default 0: markers independent of the label, right by chance 1 time in 10).
A model that reads the marker instead of the digit does well in train and poorly in test.
``meta`` holds ``marker_pixels``, ``train_marker`` / ``test_marker`` (the class each image is
marked with) and ``train_agreement`` / ``test_agreement`` (the share marked with their own label).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from modelxray.core.errors import ConfigError
from modelxray.data.base import ClassificationData
from modelxray.data.digits import Digits

MARKER_PIXELS = (0, 8, 16, 24, 32, 40, 48, 56, 31, 39)


@dataclass
class DigitsNoisy(Digits):
    noise: float = 0.2  # share of training labels flipped to another class
    noise_seed: int = 0  # which labels, and to what

    def validate(self) -> None:
        super().validate()
        if not 0.0 <= self.noise < 1.0:
            raise ConfigError("noise", f"must lie in [0, 1), got {self.noise}")

    @property
    def name(self) -> str:
        return "digits_noisy"

    def load(self, tokenizer=None) -> ClassificationData:
        data = super().load(tokenizer)
        return flip_labels(data, self.noise, self.noise_seed)


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


@dataclass
class DigitsSpurious(Digits):
    train_correlation: float = 0.95  # probability a training image carries its own label's marker
    test_correlation: float = 0.0  # the same in the test split (0 = markers independent of the label)
    marker_value: float = 1.0  # intensity of the marker pixel (pixels lie in [0, 1])
    marker_seed: int = 0

    def validate(self) -> None:
        super().validate()
        for key in ("train_correlation", "test_correlation"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise ConfigError(key, f"must lie in [0, 1], got {getattr(self, key)}")
        if not 0.0 < self.marker_value <= 1.0:
            raise ConfigError("marker_value", f"must lie in (0, 1], got {self.marker_value}")

    @property
    def name(self) -> str:
        return "digits_spurious"

    def load(self, tokenizer=None) -> ClassificationData:
        data = super().load(tokenizer)
        rng = np.random.default_rng(self.marker_seed)
        x_tr, m_tr = add_markers(data.x_train, data.y_train, self.train_correlation, self.marker_value, rng)
        x_te, m_te = add_markers(data.x_test, data.y_test, self.test_correlation, self.marker_value, rng)
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
