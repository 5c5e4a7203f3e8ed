"""Your own images with segmentation masks, for a semantic segmenter: ``root/images/*`` and
``root/masks/<same name>.png``, the layout of ADE20K, Cityscapes' label IDs and Pascal VOC's
``SegmentationClass`` once the folders are named (``images``, ``masks`` keys).

A mask is read as class indices: a palette PNG's indices (VOC) or a greyscale PNG's values. Its
values are the segmenter's class ids; ``ignore_index`` pixels (255: VOC's borders) are not scored,
and ``reduce_labels`` reads ADE20K's convention (0 = "other", not scored; the rest shift down by
one), as the segmenter's image processor does with ``do_reduce_labels``. Images are resized to the
model's square input (bilinear), masks alike (nearest). Each image's label for a backbone's k-NN
accuracy is its most common scored class.

Checked before the model loads (``check_source``): every mask is a palette or greyscale image of its
image's size. Once the segmenter's classes are known, a mask value that is none of them (nor
``ignore_index``) is one line naming the file: scored, it would count as a class the model never
predicts.

Why our own: transformers' image processors read one image at a time and torchvision's dataset
classes each fix one benchmark's folder names; this reads any folder pair into the scoring's tensors."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from modelxray.core.configurable import Configurable
from modelxray.core.errors import ConfigError
from modelxray.core.schema import REQUIRED
from modelxray.data.image_files import IMAGE_ERRORS, check_image_files, read_image, unreadable
from modelxray.data.source_checks import KindsThatRead, check_held_out, dataset_keys

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff")
MASK_MODES = ("P", "L", "I", "I;16")  # palette or greyscale: one class id per pixel


@dataclass
class MaskFolder(KindsThatRead, Configurable):
    modality: ClassVar[str] = "images"  # what its examples are: a model of another kind cannot use them
    kinds: ClassVar[tuple[str, ...]] = ("semantic_segmentation", "image_features")
    holds: ClassVar[str] = "images with segmentation masks"
    root: str = field(default="", metadata=REQUIRED)  # a folder holding the images and masks folders
    images: str = "images"  # the images folder, relative to root
    masks: str = "masks"  # the masks folder (PNG of class ids, same file stem as the image), relative to root
    ignore_index: int = 255  # mask value of pixels that are not scored
    reduce_labels: bool = False  # ADE20K's masks: 0 is "other" (not scored), class c is stored as c + 1
    max_images: int | None = None  # the first N images with a mask, in name order (null = all)
    calibration_images: int = 0  # the last N images calibrate GPTQ/AWQ and are not scored (0: digit canvases do)

    def validate(self) -> None:
        if not self.root:
            raise ConfigError("root", "is required: a folder with images/ and masks/ folders")
        self.require_positive("max_images", allow_none=True)
        self.require_non_negative("calibration_images")
        for key in ("images", "masks"):
            if not self.folder(key).is_dir():
                raise ConfigError(key, f"folder {self.folder(key)} does not exist; name the {key} folder under root")
        pairs = self.pairs()
        if not pairs:
            raise ConfigError(
                "masks", f"no image in {self.folder('images')} has a mask of the same name in {self.folder('masks')}"
            )
        check_image_files((image for image, _ in pairs), "images")
        check_image_files((mask for _, mask in pairs), "masks")

    @property
    def name(self) -> str:
        return f"mask_folder:{Path(self.root).name}"

    def folder(self, key: str) -> Path:
        path = Path(os.path.expanduser(getattr(self, key)))
        return path if path.is_absolute() else Path(os.path.expanduser(self.root)) / path

    def pairs(self) -> list[tuple[Path, Path]]:
        """(image, mask) files matched by stem, in name order."""
        masks = {p.stem: p for p in self.folder("masks").iterdir() if p.suffix.lower() == ".png"}
        images = sorted(p for p in self.folder("images").iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)
        found = [(p, masks[p.stem]) for p in images if p.stem in masks]
        return found[: self.max_images] if self.max_images is not None else found

    def class_ids(self, mask):
        """A mask's values as the segmenter's class ids, -1 where not scored."""
        import numpy as np

        ids = mask.astype(np.int64)
        unscored = ids == self.ignore_index
        if self.reduce_labels:
            unscored |= ids == 0
            ids = ids - 1
        ids[unscored] = -1
        return ids

    def check_source(self) -> None:
        """Each mask a palette or greyscale image of its image's size (headers only), before the model loads."""
        with dataset_keys():
            pairs = self.pairs()
            for image_path, mask_path in pairs:
                _check_pair(image_path, mask_path)
            check_held_out(self.calibration_images, len(pairs))

    def load(self, tokenizer=None, canvas_size: int = 224, channels: int = 3, class_names: list[str] | None = None):
        """The images and their masks at ``canvas_size``; ``class_names`` are the model's labels."""
        with dataset_keys():
            data = self._load(canvas_size, channels, class_names)
        return data.hold_out(self.calibration_images)

    def _load(self, canvas_size: int, channels: int, class_names: list[str] | None):
        import numpy as np
        import torch
        from PIL import Image

        from modelxray.data.digit_canvases import VisionTaskData
        from modelxray.data.loader_data import most_common_class

        mode = "RGB" if channels == 3 else "L"
        images, masks = [], []
        for image_path, mask_path in self.pairs():
            _check_pair(image_path, mask_path)
            im = read_image(image_path, "dataset.images", mode)
            pixels = np.asarray(im.resize((canvas_size, canvas_size)), dtype=np.float32) / 255
            m = read_image(mask_path, "dataset.masks")
            if class_names:
                self.check_classes(np.asarray(m), mask_path, len(class_names))
            small = np.asarray(m.resize((canvas_size, canvas_size), Image.NEAREST))
            image = torch.from_numpy(pixels)
            images.append(image.permute(2, 0, 1) if image.dim() == 3 else image[None])
            masks.append(torch.from_numpy(self.class_ids(small)))
        mask_stack = torch.stack(masks)
        first = [most_common_class(m) for m in mask_stack]
        n_classes = int(mask_stack.max()) + 1
        names = list(class_names or [str(c) for c in range(n_classes)])
        desc = f"{len(images)} images of {self.folder('images')} with masks from {self.folder('masks').name}/"
        empty = [torch.zeros(0, 4) for _ in images]
        no_labels = [torch.zeros(0, dtype=torch.long) for _ in images]
        return VisionTaskData(
            self.name, torch.stack(images), empty, no_labels, mask_stack, torch.tensor(first), names, desc
        )

    def check_classes(self, mask, mask_path: Path, n_classes: int) -> None:
        """Every scored value of ``mask`` is one of the model's ``n_classes`` class ids: scored, another
        value would count as a class the model never predicts."""
        import numpy as np

        stray = np.unique(mask[self.class_ids(mask) >= n_classes])  # as the file holds them
        if stray.size:
            shown = ", ".join(str(int(v)) for v in stray[:8])
            hint = "dataset.reduce_labels=true (ADE20K: 0 is 'other')" if not self.reduce_labels else "the masks"
            raise ConfigError(
                "masks",
                f"{mask_path} holds values {shown}, none of the model's {n_classes} classes (0 to {n_classes - 1}) "
                f"nor dataset.ignore_index={self.ignore_index}: check {hint} or set dataset.ignore_index",
            )


def _check_pair(image_path: Path, mask_path: Path) -> None:
    """The mask is a palette or greyscale image of its image's size (headers only)."""
    from PIL import Image

    sizes = {}
    for key, path in (("images", image_path), ("masks", mask_path)):
        try:
            with Image.open(path) as im:
                sizes[key], mode = im.size, im.mode
        except IMAGE_ERRORS as exc:
            raise ConfigError(key, unreadable(path, exc)) from None
    if mode not in MASK_MODES:
        raise ConfigError("masks", f"{mask_path} is a {mode} image; a mask is a palette or greyscale PNG of class ids")
    if sizes["masks"] != sizes["images"]:
        (mw, mh), (iw, ih) = sizes["masks"], sizes["images"]
        raise ConfigError(
            "masks",
            f"{mask_path} is {mw} x {mh} pixels and its image {image_path.name} {iw} x {ih}: a mask labels each "
            "pixel of its own image; give it the image's size",
        )
