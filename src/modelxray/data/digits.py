"""scikit-learn's handwritten digits (1,797 images of 8x8 pixels, 10 classes), offline everywhere:
the classification dataset of the robustness analyzer's classifier path. Pixels are scaled from
0..16 to [0, 1], so attack radii are in units of the full pixel range."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from modelxray.core.configurable import Configurable
from modelxray.core.errors import ConfigError
from modelxray.data.base import ClassificationData


@dataclass
class Digits(Configurable):
    modality: ClassVar[str] = "images"  # what its examples are: a model of another kind cannot use them
    test_fraction: float = 0.25  # held out for evaluation, stratified by class
    split_seed: int = 0  # the train/test split; the model trains on the train part only
    max_test: int | None = None  # evaluate the first N test images (null = all)

    def validate(self) -> None:
        if not 0.0 < self.test_fraction < 1.0:
            raise ConfigError("test_fraction", f"must lie strictly between 0 and 1, got {self.test_fraction}")
        self.require_positive("max_test", allow_none=True)

    @property
    def name(self) -> str:
        return "digits"

    def load(self, tokenizer=None) -> ClassificationData:
        return load_digits_split(self.test_fraction, self.split_seed, self.max_test)


def load_digits_split(
    test_fraction: float = 0.25, split_seed: int = 0, max_test: int | None = None
) -> ClassificationData:
    """The seeded, stratified train/test split of the digits images as (N, 64) floats in [0, 1]."""
    import numpy as np
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x = (bunch.data / 16.0).astype(np.float32)
    y = bunch.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=test_fraction, random_state=split_seed, stratify=y)
    if max_test is not None:
        x_te, y_te = x_te[:max_test], y_te[:max_test]
    t = torch.from_numpy
    return ClassificationData(
        "digits",
        t(x_tr),
        t(y_tr),
        t(x_te),
        t(y_te),
        n_classes=10,
        feature_range=(0.0, 1.0),
        input_shape=(64,),
        meta={
            "image_shape": (1, 8, 8),  # image models get the pixels resized to their input
            "class_names": [str(i) for i in range(10)],  # label i is the digit i
            "prompt_template": "a photo of the digit {label}",  # vision-language models score these prompts
        },
    )
