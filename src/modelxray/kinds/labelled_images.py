"""Kinds scored on labelled images (``VisionTaskData``: boxes, masks and a label per image):
detectors, semantic segmenters and vision backbones.

``digit_canvases`` is read as configured; the default text dataset (``dataset.examples`` of them) or
``digits`` become canvases of the model's own input size, so ``model=hf model.name_or_path=DIR`` runs
on every kind offline; a user's ``coco_folder``, ``mask_folder`` or ``image_folder`` is read where
the kind says it fits."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from modelxray.core.errors import ConfigError
from modelxray.kinds.base import Kind


class LabelledImagesKind(Kind):
    family: ClassVar[str] = "detectors, segmenters and vision backbones"
    modalities: ClassVar[tuple[str, ...]] = ("images",)
    counted_in: ClassVar[str] = "images"
    quality_columns: ClassVar[tuple[str, ...]] = ()  # its own columns in a comparison table
    needs_nothing_beside: ClassVar[bool] = True
    fitting: ClassVar[str] = (
        "dataset=digit_canvases (digits on larger canvases, with boxes and masks) or your own: "
        "dataset=coco_folder (images and instances.json: detectors, segmenters), dataset=mask_folder "
        "(images and masks: segmenters) or dataset=image_folder (a folder per class: backbones)"
    )
    reads_coco: ClassVar[bool] = False  # a COCO folder's boxes or masks are its labels
    reads_masks: ClassVar[bool] = False  # a folder of class-id masks is its labels
    reads_class_folders: ClassVar[bool] = False  # a folder per class: one label per image
    one_label_per_image: ClassVar[bool] = False  # canvases hold one digit each
    names_mask_classes: ClassVar[bool] = False  # a mask folder's classes are the model's id2label

    def reference_work(self):
        from functools import partial

        from modelxray.measure.reference_outputs import vision_reference

        return partial(vision_reference, outputs=self.image_outputs())

    def trial_inputs(self, subject: Any, full: bool = False) -> Any:
        """The first image, in the model's dtype."""
        from modelxray.measure.scoring import input_dtype, model_device

        if subject.data is None:
            return None
        return subject.data.images[:1].to(device=model_device(subject.model), dtype=input_dtype(subject.model))

    def image_outputs(self) -> Any:
        """What it is scored by on its images (``measure.vision_outputs``)."""
        raise NotImplementedError

    def examples_for(self, dataset: Any, loaded: Any, progress: bool = False) -> Any:
        from modelxray.data.base import TextDataset
        from modelxray.data.coco_folder import CocoFolder
        from modelxray.data.digit_canvases import DigitCanvases
        from modelxray.data.digits import Digits
        from modelxray.data.image_folder import ImageFolder
        from modelxray.data.mask_folder import MaskFolder

        channels, size, _ = loaded.image_shape
        config = getattr(loaded.model, "config", None)
        if isinstance(dataset, CocoFolder) and self.reads_coco:
            classes = getattr(config, "num_labels", None)  # a category no class of the model is refused
            label2id = getattr(config, "label2id", None)
            return dataset.load(canvas_size=size, channels=channels, label2id=label2id, n_classes=classes)
        if isinstance(dataset, MaskFolder) and self.reads_masks:
            id2label = getattr(config, "id2label", None) or {}
            names = [str(id2label[i]) for i in sorted(id2label)] if self.names_mask_classes else None
            return dataset.load(canvas_size=size, channels=channels, class_names=names)
        if isinstance(dataset, ImageFolder) and self.reads_class_folders:
            return class_folder_images(dataset, size, channels)
        if isinstance(dataset, DigitCanvases):
            canvases = dataset
        elif isinstance(dataset, (TextDataset, Digits)):  # the default dataset, or plain digits: canvases of them
            canvases = DigitCanvases(examples=getattr(dataset, "examples", DigitCanvases.examples))
            if isinstance(dataset, Digits):
                split = {"test_fraction": dataset.test_fraction, "split_seed": dataset.split_seed}
                canvases = dataclasses.replace(canvases, **split)
        else:
            raise ConfigError(
                "dataset",
                f"{getattr(dataset, 'name', type(dataset).__name__)} does not fit a {self.name} model "
                f"({loaded.info.name}); use {self.fitting}",
            )
        if self.one_label_per_image:  # one digit per canvas: each image has one label for k-NN accuracy
            canvases = dataclasses.replace(canvases, max_digits=1)
        return canvases.load(canvas_size=size, channels=channels)

    def data_from_batches(self, loaded: Any, batches: Any, key: str, image_shape: Any = None) -> Any:
        shape = getattr(loaded, "image_shape", None) or loaded.model.image_shape  # a subject: its pixel model's
        return self.images_from_loader(batches, tuple(shape), key)

    def images_from_loader(self, batches: Any, image_shape: tuple, key: str = "dataloader") -> Any:
        """A user's DataLoader of images and this kind's labels, resized to ``image_shape``."""
        from modelxray.data.loader_data import vision_task_from_loader

        return vision_task_from_loader(batches, self.loader_targets(), image_shape, key=key)

    def loader_targets(self) -> Any:
        """What reads the labels of a user's DataLoader (``data.loader_data``'s targets)."""
        raise NotImplementedError


def class_folder_images(dataset: Any, size: int, channels: int) -> Any:
    """A folder per class at the backbone's input: one label per image, for k-NN accuracy."""
    import torch

    from modelxray.data.digit_canvases import VisionTaskData

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
