"""scikit-learn's two bundled photos (``load_sample_images``: china.jpg and flower.jpg, 427x640 RGB)
as a small labelled image-classification dataset that works offline everywhere: seeded random
square crops of each photo, labelled by the photo they come from (classes ``china``, ``flower``).

Why our own: no library turns the two photos into a classification split, and digits are grey 8x8
images, so RGB image models (ViT, CLIP) had no real-photo dataset without a download. Train and test
crops come from disjoint vertical bands of each photo (the right ``test_fraction`` of its width is
the test band), so a test crop never shares a pixel with a training crop. Crops keep their own
resolution (``crop_size``); the run resizes them to the model's input (``data/images.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from modelxray.core.configurable import Configurable
from modelxray.core.errors import ConfigError
from modelxray.data.base import ClassificationData

CLASSES = ("china", "flower")  # the photos, in the order load_sample_images returns them
PHOTO_SHAPE = (427, 640)  # height, width of both photos (checked when they load)


@dataclass
class SampleImages(Configurable):
    modality: ClassVar[str] = "images"  # what its examples are: a model of another kind cannot use them
    crop_size: int = 64  # side of each square crop, in photo pixels
    crops_per_class: int = 100  # crops cut from each photo (train and test together)
    test_fraction: float = 0.25  # share of each photo's crops held out, cut from its right band
    seed: int = 0  # crop positions

    def validate(self) -> None:
        self.require_positive("crop_size", "crops_per_class")
        if not 0.0 < self.test_fraction < 1.0:
            raise ConfigError("test_fraction", f"must lie strictly between 0 and 1, got {self.test_fraction}")
        n_test = self.n_test()
        if not 0 < n_test < self.crops_per_class:
            raise ConfigError(
                "crops_per_class",
                f"{self.crops_per_class} crops with test_fraction {self.test_fraction} leave {n_test} test and "
                f"{self.crops_per_class - n_test} train crops per class; both need at least one",
            )
        narrowest = min(band[1] - band[0] for band in self.bands())
        if self.crop_size > min(PHOTO_SHAPE[0], narrowest):
            raise ConfigError(
                "crop_size",
                f"{self.crop_size} does not fit: the photos are {PHOTO_SHAPE[0]} pixels high and their "
                f"narrowest band (train or test, by test_fraction) is {narrowest} wide; use a smaller crop_size "
                "or a test_fraction nearer 0.5",
            )

    @property
    def name(self) -> str:
        return "sample_images"

    def n_test(self) -> int:
        """Test crops per class (rounded share of ``crops_per_class``)."""
        return round(self.test_fraction * self.crops_per_class)

    def bands(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """Column ranges ``[start, end)`` of the train band (left) and the test band (right)."""
        width = PHOTO_SHAPE[1]
        cut = round(width * (1.0 - self.test_fraction))
        return (0, cut), (cut, width)

    def load(self, tokenizer=None) -> ClassificationData:
        import numpy as np
        import torch

        photos = _photos()
        rng = np.random.default_rng(self.seed)
        (train_band, test_band), n_test = self.bands(), self.n_test()
        splits = {"train": ([], []), "test": ([], [])}
        for label, photo in enumerate(photos):
            for split, band, n in (("train", train_band, self.crops_per_class - n_test), ("test", test_band, n_test)):
                splits[split][0].append(_crops(photo, band, n, self.crop_size, rng))
                splits[split][1].append(np.full(n, label, dtype=np.int64))
        x_tr, y_tr, x_te, y_te = (
            torch.from_numpy(np.concatenate(part)) for split in ("train", "test") for part in splits[split]
        )
        shape = (3, self.crop_size, self.crop_size)
        return ClassificationData(
            self.name,
            x_tr,
            y_tr,
            x_te,
            y_te,
            n_classes=len(CLASSES),
            feature_range=(0.0, 1.0),
            input_shape=shape,
            meta={
                "image_shape": shape,
                "class_names": list(CLASSES),
                "prompt_template": "a photo of {label}.",  # vision-language models score these prompts
                "bands": {"train": train_band, "test": test_band},  # photo columns each split's crops come from
            },
        )


def _photos() -> list:
    """The two photos as uint8 (H, W, 3) arrays, in the order of ``CLASSES``."""
    from pathlib import Path

    from sklearn.datasets import load_sample_images

    bunch = load_sample_images()
    names = tuple(Path(f).stem for f in bunch.filenames)
    if names != CLASSES or any(im.shape[:2] != PHOTO_SHAPE for im in bunch.images):
        raise ConfigError(
            "dataset",
            f"scikit-learn's sample images are {names} shaped {[im.shape for im in bunch.images]}; "
            f"sample_images expects {CLASSES} of {PHOTO_SHAPE}",
        )
    return list(bunch.images)


def _crops(photo, band: tuple[int, int], n: int, size: int, rng):
    """``n`` random ``size``-pixel square crops whose columns lie in ``band``, as (n, 3, size, size)
    floats in [0, 1]."""
    import numpy as np

    tops = rng.integers(0, photo.shape[0] - size + 1, n)
    lefts = rng.integers(band[0], band[1] - size + 1, n)
    crops = np.stack([photo[t : t + size, c : c + size] for t, c in zip(tops, lefts)])
    return (crops.transpose(0, 3, 1, 2) / 255.0).astype(np.float32)
