"""Your own labelled images: one folder per class (``root/<class>/*.png``), the layout of
torchvision's ``ImageFolder``. Read with Pillow, converted to the model's channel count later.

Every image is resized to ``image_size`` (square) when read, then to the model's input size when the
run starts (``data/images.py``); classes are the folder names in sorted order, or the model's own
label ids when its config names the same classes (``label2id``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from modelxray.core.configurable import Configurable
from modelxray.core.errors import ConfigError
from modelxray.core.schema import REQUIRED
from modelxray.data.base import ClassificationData
from modelxray.data.image_files import check_image_files, read_image

EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")


@dataclass
class ImageFolder(Configurable):
    modality: ClassVar[str] = "images"  # what its examples are: a model of another kind cannot use them
    root: str = field(default="", metadata=REQUIRED)  # a folder holding one sub-folder of images per class
    image_size: int = 224  # images are read at this square size (then fit to the model's input)
    channels: int = 3  # 3 = RGB, 1 = grey
    max_per_class: int | None = None  # the first N images of each class, in name order (null = all)

    def validate(self) -> None:
        if not self.root:
            raise ConfigError("root", "is required: a folder with one sub-folder of images per class")
        self.require_positive("image_size", "max_per_class", allow_none=True)
        self.require_choice("channels", [1, 3])
        root = Path(os.path.expanduser(self.root))
        if not root.is_dir():
            raise ConfigError("root", f"folder {self.root!r} does not exist")
        classes = self.classes()
        if len(classes) < 2:
            raise ConfigError(
                "root", f"{self.root!r} needs at least two class sub-folders with images, found {classes}"
            )
        check_image_files((f for name in classes for f in self.files(name)), "root")

    def files(self, class_name: str) -> list[Path]:
        """The images read for one class: the first ``max_per_class`` in name order."""
        return _images(Path(os.path.expanduser(self.root)) / class_name)[: self.max_per_class]

    @property
    def name(self) -> str:
        return f"image_folder:{Path(self.root).name}"

    def classes(self) -> list[str]:
        root = Path(os.path.expanduser(self.root))
        return sorted(d.name for d in root.iterdir() if d.is_dir() and any(_images(d)))

    def load(self, tokenizer=None) -> ClassificationData:
        import numpy as np
        import torch
        from PIL import Image

        root = Path(os.path.expanduser(self.root))
        mode = "RGB" if self.channels == 3 else "L"
        xs, ys = [], []
        classes = self.classes()
        for label, name in enumerate(classes):
            for f in self.files(name):
                im = read_image(f, "dataset.root", mode)
                im = im.resize((self.image_size, self.image_size), Image.Resampling.BILINEAR)
                arr = np.asarray(im, dtype=np.float32) / 255.0
                xs.append(arr.reshape(self.image_size, self.image_size, self.channels).transpose(2, 0, 1))
                ys.append(label)
        x = torch.from_numpy(np.stack(xs))
        y = torch.tensor(ys, dtype=torch.int64)
        shape = (self.channels, self.image_size, self.image_size)
        return ClassificationData(
            self.name,
            x[:0],
            y[:0],
            x,
            y,
            n_classes=len(classes),
            feature_range=(0.0, 1.0),
            input_shape=shape,
            meta={
                "image_shape": shape,
                "class_names": classes,
                "prompt_template": "a photo of a {label}.",  # vision-language models score these prompts
                "root": str(root),
            },
        )


def _images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in EXTENSIONS)
