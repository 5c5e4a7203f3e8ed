"""Classifiers scored on a classification dataset's test split: any module that maps inputs to class
logits (the digits MLP and CNN, a grokking network, a TorchScript or state-dict classifier); image
classifiers and CLIP-style dual encoders are classifiers too (``image_classification``,
``vision_language``)."""

from __future__ import annotations

from typing import Any, ClassVar

from modelxray.core.errors import ConfigError
from modelxray.kinds.base import Kind


class Classifier(Kind):
    name: ClassVar[str] = "classification"
    task: ClassVar[str] = "classification"
    noun: ClassVar[str] = "classifier"
    models: ClassVar[str] = "`mlp` / `grokking_transformer` (trained with `train=classifier`), `file` classifiers"
    datasets: ClassVar[str] = "`digits` and its variants, `modular_addition`, `image_folder`"
    quality: ClassVar[str] = "loss, accuracy with a 95% Wilson interval, top-5 accuracy"
    fitting: ClassVar[str] = "dataset=digits"
    headline: ClassVar[str] = "accuracy"
    scored_by: ClassVar[str] = "label"
    counted_in: ClassVar[str] = "samples"
    caches_reference: ClassVar[bool] = True
    trains_as: ClassVar[str | None] = "classification"

    def reference_work(self):
        from modelxray.measure.reference_outputs import classifier_reference

        return classifier_reference

    def data_type(self) -> type | None:
        from modelxray.data.base import ClassificationData

        return ClassificationData

    def default_dataset(self, dataset: Any) -> tuple[Any, str] | None:
        from modelxray.data.base import TextDataset

        if not isinstance(dataset, TextDataset):
            return None
        from modelxray.data.digits import Digits

        note = f"No dataset was chosen, so this {self.noun} is scored on scikit-learn's digits (dataset=... picks another)."
        return Digits(), note

    def check_dataset(self, dataset: Any, loaded: Any) -> None:
        from modelxray.data.base import TextDataset

        if isinstance(dataset, TextDataset):
            raise ConfigError(
                "dataset",
                f"{dataset.name} is text and {loaded.info.name} is a classification model; use dataset=digits",
            )

    def trial_inputs(self, subject: Any, full: bool = False) -> Any:
        """The first test input, as the model takes it (an image, a feature row, a token sequence)."""
        from modelxray.measure.classifier_reference import example_inputs
        from modelxray.measure.scoring import input_dtype, model_device

        if subject.data is None:
            return None
        return example_inputs(subject.data, 1, model_device(subject.model), input_dtype(subject.model))

    def data_from_batches(self, loaded: Any, batches: Any, key: str, image_shape: Any = None) -> Any:
        from modelxray.data.loader_data import classification_from_loader

        return model_images(classification_from_loader(batches, key=key), loaded, key, image_shape)


def model_images(data: Any, loaded: Any, key: str, image_shape: Any = None) -> Any:
    """A classifier's split from a loader: flat inputs of the model's C*H*W values stand for its
    images (as the digits dataset's do); pixels a processor's normalisation is applied to must be in
    [0, 1], else one line (they look normalised already)."""
    import dataclasses
    import math

    shape = image_shape or getattr(loaded, "image_shape", None) or getattr(loaded.model, "image_shape", None)
    if shape is not None and "image_shape" not in data.meta and math.prod(data.input_shape) == math.prod(shape):
        data = dataclasses.replace(data, meta={**data.meta, "image_shape": tuple(shape)})
    mean, std = getattr(loaded.model, "mean", None), getattr(loaded.model, "std", None)
    normalises = getattr(loaded, "processor", None) is not None and mean is not None and std is not None
    normalises = normalises and bool((mean != 0).any() or (std != 1).any())
    lo, hi = data.feature_range
    if normalises and (lo < -0.01 or hi > 1.01):
        raise ConfigError(
            key,
            f"yields pixels in [{lo:.3g}, {hi:.3g}]: normalised already, it seems; with processor= the model "
            "applies the processor's normalisation to pixels in [0, 1] itself: give pixels in [0, 1] "
            "(processor(images, do_normalize=False)), or leave processor out and give image_shape=(C, H, W) "
            "to feed the pixels as they are",
        )
    return data
