"""The evaluation images of a detector, a semantic segmenter or a vision backbone, from the
configured dataset: ``digit_canvases`` as configured, a user's ``coco_folder`` (detectors and
segmenters); the default text dataset (``dataset.examples``
of them) or ``digits`` become canvases of the model's own input size (one digit per canvas for a backbone, whose k-NN accuracy
needs one label per image). So ``model=hf model.name_or_path=DIR`` with no ``dataset=`` runs on
every kind, offline."""

from __future__ import annotations

import dataclasses
from typing import Any

from modelxray.core.errors import ConfigError
from modelxray.data.digit_canvases import DigitCanvases, VisionTaskData


def vision_task_data(kind: str, dataset: Any, loaded: Any) -> VisionTaskData:
    from modelxray.data.base import TextDataset
    from modelxray.data.coco_folder import CocoFolder
    from modelxray.data.digits import Digits

    channels, size, _ = loaded.image_shape
    if isinstance(dataset, CocoFolder) and kind in ("object_detection", "semantic_segmentation"):
        label2id = getattr(getattr(loaded.model, "config", None), "label2id", None)
        return dataset.load(canvas_size=size, channels=channels, label2id=label2id)
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
            "use dataset=digit_canvases (digits on larger canvases, with boxes and masks) or, for a detector "
            "or segmenter, dataset=coco_folder (your images and instances.json)",
        )
    if kind == "image_features" and not isinstance(dataset, DigitCanvases):
        canvases = dataclasses.replace(canvases, max_digits=1)
    return canvases.load(canvas_size=size, channels=channels)
