"""Semantic segmenters (SegFormer, UperNet, DPT, BEiT ..., Mask2Former, MaskFormer and EoMT by their
semantic maps, the digits segmenter): a class per pixel, scored by mean IoU."""

from __future__ import annotations

from typing import Any, ClassVar

from modelxray.kinds.labelled_images import LabelledImagesKind


class SemanticSegmenter(LabelledImagesKind):
    name: ClassVar[str] = "semantic_segmentation"
    task: ClassVar[str] = "semantic_segmentation"
    noun: ClassVar[str] = "semantic segmenter"
    models: ClassVar[str] = (
        "`digits_segmenter`, `hf` with a `...ForSemanticSegmentation` config (SegFormer, UperNet, DPT, BEiT ...), "
        "Mask2Former, MaskFormer, EoMT"
    )
    datasets: ClassVar[str] = (
        "`digit_canvases` (the digits' pixels as masks; the default), `coco_folder`, `mask_folder` (your images and "
        "class-id masks)"
    )
    quality: ClassVar[str] = "mean IoU and pixel accuracy, bootstrap errors over images"
    hf_tables: ClassVar[tuple[str, ...]] = (
        "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES",
        "MODEL_FOR_UNIVERSAL_SEGMENTATION_MAPPING_NAMES",  # their semantic maps
    )
    # universal segmenters scored by their semantic maps: mask queries from pixels alone (OneFormer also
    # reads a task prompt, DETR's panoptic head and VidEoMT other inputs)
    universal_segmenters: ClassVar[tuple[str, ...]] = ("mask2former", "maskformer", "eomt", "eomt_dinov3")
    auto_class: ClassVar[str] = "AutoModelForSemanticSegmentation"
    headline: ClassVar[str] = "miou"
    quality_columns: ClassVar[tuple[str, ...]] = ("miou", "pixel_accuracy", "pixel_agree")
    reads_coco: ClassVar[bool] = True
    reads_masks: ClassVar[bool] = True
    names_mask_classes: ClassVar[bool] = True

    def loader_targets(self):
        from modelxray.data.loader_data import MaskTargets

        return MaskTargets()

    def image_outputs(self):
        from modelxray.measure.vision_outputs import class_map_outputs

        return class_map_outputs

    def degenerate_signs(self, metrics: dict, subject: Any, uniform_share: float) -> list[str]:
        """Pixel accuracy no better than labelling every pixel as the commonest class of the masks."""
        from modelxray.metrics.degenerate import commonest_share

        masks = getattr(subject.data, "masks", None)
        if "pixel_accuracy" not in metrics or masks is None:
            return []
        share = commonest_share(masks)
        if metrics["pixel_accuracy"] > share + 2 * metrics.get("pixel_accuracy_se", 0.0):
            return []
        return [
            f"its pixel accuracy {metrics['pixel_accuracy']:.3f} is no better than labelling every pixel as the "
            f"commonest class ({share:.3f})"
        ]
