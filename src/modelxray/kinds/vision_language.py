"""CLIP-style dual encoders as zero-shot image classifiers: each class's prompt is encoded once and
an image's logits are its similarities to them."""

from __future__ import annotations

from typing import Any, ClassVar

from modelxray.core.errors import ConfigError
from modelxray.kinds.classifier import Classifier


class DualEncoder(Classifier):
    name: ClassVar[str] = "vision_language"
    noun: ClassVar[str] = "CLIP-style dual encoder"
    models: ClassVar[str] = "`digits_clip`, `hf` with a CLIP-style dual encoder config (`CLIPModel`, `SiglipModel`)"
    datasets: ClassVar[str] = "classification data that names its classes: `digits` (and its variants), `image_folder`"
    quality: ClassVar[str] = "zero-shot accuracy (the same metrics as an image classifier)"
    hf_tables: ClassVar[tuple[str, ...]] = ("MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES",)
    # dual encoders that no table lists: matched by their class name's ending
    architecture_suffixes: ClassVar[tuple[str, ...]] = ("CLIPModel", "SiglipModel")
    auto_class: ClassVar[str] = "AutoModel"
    modalities: ClassVar[tuple[str, ...]] = ("images",)
    takes_byte_tokenizer: ClassVar[bool] = True
    from_file: ClassVar[bool] = True

    def check_file_keys(self, source: Any, fmt: str) -> None:
        if fmt != "hf_dir":
            raise ConfigError("kind", f"{self.name} models load from a Hugging Face directory; {source.path} is {fmt}")
