"""Vision backbones (DINOv2, ViTModel, ConvNeXt, Swin ..., the digits segmenter's encoder): an embedding
per image, scored by leave-one-out k-NN accuracy and the embeddings' drift."""

from __future__ import annotations

from typing import Any, ClassVar

from modelxray.kinds.labelled_images import LabelledImagesKind


class ImageFeatures(LabelledImagesKind):
    name: ClassVar[str] = "image_features"
    task: ClassVar[str] = "image_features"
    noun: ClassVar[str] = "vision backbone"
    models: ClassVar[str] = (
        "`digits_segmenter model.kind=image_features` (its encoder), `hf` with a bare vision model (DINOv2, "
        "ViTModel, ConvNeXt, Swin ...)"
    )
    datasets: ClassVar[str] = "`digit_canvases` (one digit per canvas; the default), `image_folder`"
    quality: ClassVar[str] = "leave-one-out k-NN accuracy of the embeddings with a Wilson interval"
    hf_tables: ClassVar[tuple[str, ...]] = ("MODEL_FOR_IMAGE_MAPPING_NAMES",)  # bare backbones, last: a fallback
    auto_class: ClassVar[str] = "AutoModel"
    headline: ClassVar[str] = "knn_accuracy"
    quality_columns: ClassVar[tuple[str, ...]] = ("knn_accuracy", "embedding_drift")
    reads_masks: ClassVar[bool] = True
    reads_class_folders: ClassVar[bool] = True
    one_label_per_image: ClassVar[bool] = True

    def loader_targets(self):
        from modelxray.data.loader_data import ImageLabelTargets

        return ImageLabelTargets()

    def image_outputs(self):
        from modelxray.measure.vision_outputs import embedding_outputs

        return embedding_outputs

    def degenerate_signs(self, metrics: dict, subject: Any, uniform_share: float) -> list[str]:
        """Embeddings whose nearest neighbours are no better than always answering the commonest label."""
        from modelxray.metrics.degenerate import chance_signs, commonest_share

        labels = getattr(subject.data, "image_labels", None)
        if "knn_accuracy" not in metrics or labels is None:
            return []
        n = int(labels.numel())
        return chance_signs("k-NN accuracy", round(metrics["knn_accuracy"] * n), n, commonest_share(labels))
