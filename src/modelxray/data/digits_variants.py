"""Digits with a known defect, for studying memorization and shortcut learning (offline, instant).

``digits_noisy``: the ``digits`` split with a share ``noise`` of the *training* labels replaced by a
different class chosen uniformly at random (seeded); the test labels stay clean. ``meta["flipped"]``
holds the flipped training positions (sorted int64 tensor) and ``meta["clean_labels"]`` the original
training labels.

``digits_spurious``: a shortcut feature. Ten border pixels that are blank in over 99% of the digits
images (the left column, pixel indices 0, 8, ..., 56, and pixels 31 and 39 on the right edge) become
class markers: marker pixel ``digits_defects.MARKER_PIXELS[c]`` is set to ``marker_value`` for an image marked as
class c. In the train split an image is marked with its own label with probability
``train_correlation`` (else with a uniformly random class); in the test split with probability
``test_correlation`` (default 0: markers independent of the label, right by chance 1 time in 10).
A model that reads the marker instead of the digit does well in train and poorly in test.
``meta`` holds ``marker_pixels``, ``train_marker`` / ``test_marker`` (the class each image is
marked with) and ``train_agreement`` / ``test_agreement`` (the share marked with their own label).
"""

from __future__ import annotations

from dataclasses import dataclass

from modelxray.core.errors import ConfigError
from modelxray.data.base import ClassificationData
from modelxray.data.digits import Digits


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
        from modelxray.data.digits_defects import flip_labels

        return flip_labels(super().load(tokenizer), self.noise, self.noise_seed)


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
        from modelxray.data.digits_defects import mark_spurious

        return mark_spurious(
            super().load(tokenizer), self.train_correlation, self.test_correlation, self.marker_value, self.marker_seed
        )
