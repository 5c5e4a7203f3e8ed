"""The evaluation images of a detector, a semantic segmenter or a vision backbone, from the
configured dataset: ``digit_canvases`` as configured; a user's ``coco_folder`` (detectors and
segmenters), ``mask_folder`` (segmenters) or ``image_folder`` (backbones: one label per image);
the default text dataset (``dataset.examples`` of them) or ``digits`` become canvases of the
model's own input size (one digit per canvas for a backbone, whose k-NN accuracy needs one label per
image). So ``model=hf model.name_or_path=DIR`` with no ``dataset=`` runs on every kind, offline."""

from __future__ import annotations

import dataclasses
from typing import Any

from modelxray.core.errors import ConfigError
from modelxray.data.digit_canvases import DigitCanvases, VisionTaskData


def vision_task_data(kind: str, dataset: Any, loaded: Any) -> VisionTaskData:
    from modelxray.data.base import TextDataset
    from modelxray.data.coco_folder import CocoFolder
    from modelxray.data.digits import Digits
    from modelxray.data.image_folder import ImageFolder
    from modelxray.data.mask_folder import MaskFolder

    channels, size, _ = loaded.image_shape
    config = getattr(loaded.model, "config", None)
    if isinstance(dataset, CocoFolder) and kind in ("object_detection", "semantic_segmentation"):
        return dataset.load(canvas_size=size, channels=channels, label2id=getattr(config, "label2id", None))
    if isinstance(dataset, MaskFolder) and kind in ("semantic_segmentation", "image_features"):
        id2label = getattr(config, "id2label", None) or {}
        names = [str(id2label[i]) for i in sorted(id2label)] if kind == "semantic_segmentation" else None
        return dataset.load(canvas_size=size, channels=channels, class_names=names)
    if isinstance(dataset, ImageFolder) and kind == "image_features":
        return _labelled_images(dataset, size, channels)
    if isinstance(dataset, DigitCanvases):
        canvases = dataset
    elif isinstance(dataset, (TextDataset, Digits)):  # the default dataset, or plain digits: canvases of them
        canvases = DigitCanvases(examples=getattr(dataset, "examples", DigitCanvases.examples))
        if isinstance(dataset, Digits):
            canvases = dataclasses.replace(canvases, test_fraction=dataset.test_fraction, split_seed=dataset.split_seed)
    else:
        raise ConfigError(
            "dataset",
            f"{getattr(dataset, 'name', type(dataset).__name__)} does not fit a {kind} model ({loaded.info.name}); "
            "use dataset=digit_canvases (digits on larger canvases, with boxes and masks) or your own: "
            "dataset=coco_folder (images and instances.json: detectors, segmenters), dataset=mask_folder "
            "(images and masks: segmenters) or dataset=image_folder (a folder per class: backbones)",
        )
    if kind == "image_features":  # one digit per canvas: each image has one label for k-NN accuracy
        canvases = dataclasses.replace(canvases, max_digits=1)
    return canvases.load(canvas_size=size, channels=channels)


def _labelled_images(dataset: Any, size: int, channels: int) -> VisionTaskData:
    """A folder per class at the backbone's input: one label per image, for k-NN accuracy."""
    import torch

    data = dataclasses.replace(dataset, image_size=size, channels=channels).load()
    n = int(data.x_test.shape[0])
    return VisionTaskData(
        dataset.name,
        data.x_test,
        [torch.zeros(0, 4) for _ in range(n)],
        [torch.zeros(0, dtype=torch.long) for _ in range(n)],
        torch.zeros(n, size, size, dtype=torch.long),
        data.y_test,
        list(data.meta["class_names"]),
        f"{n} images in {len(data.meta['class_names'])} class folders of {data.meta['root']}",
    )
