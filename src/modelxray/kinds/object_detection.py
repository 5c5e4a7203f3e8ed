"""Object detectors (DETR, Conditional/Deformable DETR, RT-DETR, YOLOS ..., the digits detector): boxes
and labels, scored by COCO mAP."""

from __future__ import annotations

from typing import Any, ClassVar

from modelxray.kinds.labelled_images import LabelledImagesKind


class ObjectDetector(LabelledImagesKind):
    name: ClassVar[str] = "object_detection"
    task: ClassVar[str] = "object_detection"
    noun: ClassVar[str] = "object detector"
    models: ClassVar[str] = (
        "`digits_detector`, `hf` with a `...ForObjectDetection` config (DETR, Conditional/Deformable DETR, RT-DETR, "
        "YOLOS ...) and its image processor"
    )
    datasets: ClassVar[str] = (
        "`digit_canvases` (digits on larger canvases, with boxes; the default), `coco_folder` (your images and COCO "
        "`instances.json`)"
    )
    quality: ClassVar[str] = "COCO mAP@[.5:.95] and mAP@.5 (pycocotools), bootstrap errors over images"
    hf_tables: ClassVar[tuple[str, ...]] = ("MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES",)
    auto_class: ClassVar[str] = "AutoModelForObjectDetection"
    headline: ClassVar[str] = "map"
    quality_columns: ClassVar[tuple[str, ...]] = ("map", "map_50", "agree_map_50")
    needs_processor: ClassVar[str | None] = "image processor"
    reads_coco: ClassVar[bool] = True

    def loader_targets(self):
        from modelxray.data.loader_data import BoxTargets

        return BoxTargets()

    def image_outputs(self):
        from modelxray.measure.vision_outputs import detection_outputs

        return detection_outputs

    def degenerate_signs(self, metrics: dict, subject: Any, uniform_share: float) -> list[str]:
        """A detector that finds none of the labelled objects: mAP@.5 at 0."""
        from modelxray.metrics.degenerate import floor_signs

        return floor_signs("mAP@.5", metrics["map_50"], 0.0) if "map_50" in metrics else []
