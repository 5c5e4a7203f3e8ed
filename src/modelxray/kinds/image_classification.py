"""Image classifiers: pixels in, class logits out (ViT, ResNet, ConvNeXt, MobileNet ..., the digits
CNN and ViT)."""

from __future__ import annotations

from typing import Any, ClassVar

from modelxray.core.errors import ConfigError
from modelxray.kinds.classifier import Classifier


class ImageClassifier(Classifier):
    name: ClassVar[str] = "image_classification"
    noun: ClassVar[str] = "image classifier"
    models: ClassVar[str] = (
        "`digits_mlp` (MLP or CNN), `digits_vit`, `hf` with a `...ForImageClassification` config (ViT, ResNet, "
        "ConvNeXt, MobileNet ...), `mlp` / `grokking_transformer` (trained with `train=classifier`)"
    )
    datasets: ClassVar[str] = (
        "`digits`, `digits_noisy`, `digits_spurious`, `modular_addition`, `image_folder` (your images, a folder "
        "per class), `sample_images` (crops of scikit-learn's two photos)"
    )
    hf_tables: ClassVar[tuple[str, ...]] = ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",)
    auto_class: ClassVar[str] = "AutoModelForImageClassification"
    modalities: ClassVar[tuple[str, ...]] = ("images",)
    needs_nothing_beside: ClassVar[bool] = True
    file_key: ClassVar[str | None] = "input_shape"
    file_key_is: ClassVar[str] = "is an image classifier's input"
    from_file: ClassVar[bool] = True
    from_target: ClassVar[bool] = True

    def check_file_keys(self, source: Any, fmt: str) -> None:
        if fmt == "torchscript" and source.input_shape is None:
            raise ConfigError(
                "input_shape",
                "a TorchScript image classifier needs one image's shape, e.g. model.input_shape=[3, 224, 224]",
            )
