"""Evaluate perturbations of a detector, a semantic segmenter or a vision backbone by its task's own
scores: mAP against the labelled boxes (and mAP@.5 against the clean model's detections), mean IoU
against the masks (and pixel agreement with the clean class maps), k-NN accuracy of the embeddings
(and their cosine drift from the clean ones).

The image corruptions are the classifiers' (``perturb/images.py``): Gaussian pixel noise, blur and
occlusion patches, applied to the images before the model's own normalisation. Weight and
quantization noise act on the model and are scored by ``evaluate``."""

from __future__ import annotations

from typing import Any

import torch

from modelxray.measure.vision_outputs import vision_outputs
from modelxray.metrics.detection import coco_map
from modelxray.metrics.embeddings import cosine_drift, knn_accuracy
from modelxray.metrics.segmentation import segmentation_scores
from modelxray.perturb.images import gaussian_blur, gaussian_noise, occlude, patch_positions

QUALITY = {"object_detection": "map_50", "semantic_segmentation": "miou", "image_features": "knn_accuracy"}
BOUNDS = (0.0, 1.0)  # images are pixels in [0, 1]


class VisionTaskHarness:
    dropout_family = None
    substitution_family = None

    def __init__(self, subject: Any, n: int, batch_size: int, bootstrap: int, knn_k: int, occlusion_fill: str):
        import dataclasses

        data = subject.data
        self.subject = subject
        self.task = subject.task
        self.quality = QUALITY[self.task]
        self.batch_size, self.bootstrap, self.knn_k = batch_size, bootstrap, knn_k
        self.images = data.images[:n]
        self.size = int(self.images.shape[0])
        self.data = dataclasses.replace(
            data,
            images=self.images,
            boxes=data.boxes[:n],
            labels=data.labels[:n],
            masks=data.masks[:n],
            image_labels=data.image_labels[:n],
        )
        self.image_shape = tuple(self.images.shape[1:])
        self.occlusion_value = 0.5 if occlusion_fill == "mid" else 0.0
        self.clean_outputs = self._outputs(self.images)
        self.clean = self.score(self.clean_outputs)

    def _outputs(self, images: torch.Tensor, model: Any = None) -> dict:
        import dataclasses

        view = dataclasses.replace(self.subject, data=dataclasses.replace(self.data, images=images))
        if model is not None:
            view = dataclasses.replace(view, model=model)
        return vision_outputs(view, self.batch_size, 100)

    def score(self, out: dict) -> dict[str, float]:
        """The task's quality against the labels, and agreement with the clean outputs once known."""
        d, clean = self.data, getattr(self, "clean_outputs", None)
        if self.task == "object_detection":
            truth = [{"boxes": b, "labels": lab} for b, lab in zip(d.boxes, d.labels)]
            m = coco_map(out["detections"], truth, self.bootstrap)
            if clean is not None and out is not clean:
                pseudo = [{"boxes": c["boxes"][:5], "labels": c["labels"][:5]} for c in clean["detections"]]
                m["agree_map_50"] = coco_map(out["detections"], pseudo, 0)["map_50"]
            return m
        if self.task == "semantic_segmentation":
            maps = out["class_maps"]
            n = int(max(int(d.masks.max()), int(maps.max()))) + 1
            m = segmentation_scores(maps, d.masks, n, self.bootstrap)
            if clean is not None and out is not clean:
                m["pixel_agree"] = float((maps == clean["class_maps"]).double().mean())
            return m
        m = knn_accuracy(out["embeddings"], d.image_labels, self.knn_k)
        if clean is not None and out is not clean:
            m["embedding_drift"] = cosine_drift(out["embeddings"], clean["embeddings"])["embedding_drift"]
        return m

    def clean_of(self, n: int) -> dict[str, float]:
        return self.clean

    def evaluate(self, desc: str, model: Any = None) -> dict[str, float]:
        """The model as it is now (after weight noise), or another ``model`` (a quantized copy), on
        the clean images."""
        return self.score(self._outputs(self.images, model))

    def perturb_inputs(self, family: str, level: float, generator: torch.Generator, desc: str) -> dict[str, float]:
        """Scores on the images under an image corruption at ``level`` (as ``ClassifierHarness``)."""
        x = self.images
        if family == "gaussian_noise":
            x = gaussian_noise(x, level, generator, BOUNDS)
        elif family == "blur":
            x = gaussian_blur(x, level)
        elif family == "occlusion":
            corners = patch_positions(x.shape[0], x.shape[-2], x.shape[-1], level, generator)
            x = occlude(x, level, corners, self.occlusion_value)
        else:  # pragma: no cover - the analyzer asks for the image families only
            raise ValueError(f"unknown image corruption {family!r}")
        return self.score(self._outputs(x))
