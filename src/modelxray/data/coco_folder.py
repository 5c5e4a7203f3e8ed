"""Your own labelled scenes in COCO format: a folder of images and an ``instances.json`` (COCO's
``images``, ``annotations`` with ``bbox`` [x, y, w, h] and optional ``segmentation``, and
``categories``), for detectors and semantic segmenters.

Each image is resized to the model's square input size when read, its boxes scaled alike. A
category becomes the model's label id when the model's config names it (``label2id``, matched
without case), else its COCO ``category_id``. Masks are the annotations' polygons or RLEs drawn by
pycocotools (``annToMask``), each pixel labelled with its category's label, as the segmenter's class
maps count; an annotation without a segmentation fills its box. Pixels no annotation covers are the
model's background class when it names one (``background``, ``__background__``, ``unlabeled``), else
not scored: COCO leaves unannotated whatever it does not name."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from modelxray.core.configurable import Configurable
from modelxray.core.errors import ConfigError
from modelxray.core.schema import REQUIRED
from modelxray.data.image_files import read_image

BACKGROUND_NAMES = ("background", "__background__", "unlabeled", "unlabelled")


@dataclass
class CocoFolder(Configurable):
    modality: ClassVar[str] = "images"  # what its examples are: a model of another kind cannot use them
    root: str = field(default="", metadata=REQUIRED)  # a folder of images with a COCO annotations file
    annotations: str = "instances.json"  # the annotations file, relative to root (or an absolute path)
    max_images: int | None = None  # the first N annotated images, in id order (null = all)
    calibration_images: int = 0  # the last N images calibrate GPTQ/AWQ and are not scored (0: digit canvases do)

    def validate(self) -> None:
        if not self.root:
            raise ConfigError("root", "is required: a folder of images with a COCO instances.json")
        self.require_positive("max_images", allow_none=True)
        self.require_non_negative("calibration_images")
        root = Path(os.path.expanduser(self.root))
        if not root.is_dir():
            raise ConfigError("root", f"folder {self.root!r} does not exist")
        if not self.annotations_path().is_file():
            raise ConfigError(
                "annotations",
                f"{self.annotations_path()} does not exist; give the COCO annotations file (instances.json)",
            )

    @property
    def name(self) -> str:
        return f"coco_folder:{Path(self.root).name}"

    def annotations_path(self) -> Path:
        path = Path(os.path.expanduser(self.annotations))
        return path if path.is_absolute() else Path(os.path.expanduser(self.root)) / path

    def read(self) -> dict[str, Any]:
        """The annotations file, checked for what the scoring needs (one line naming what is missing)."""
        where = self.annotations_path()
        try:
            spec = json.loads(where.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError("annotations", f"{where} is not readable JSON: {exc}") from None
        for key in ("images", "annotations", "categories"):
            if not isinstance(spec.get(key), list):
                raise ConfigError("annotations", f"{where} has no {key!r} list: is it a COCO instances file?")
        return spec

    def load(self, tokenizer=None, canvas_size: int = 224, channels: int = 3, label2id: dict | None = None):
        """The images at ``canvas_size`` with their boxes, labels and masks, labels mapped through the
        model's ``label2id``."""
        import numpy as np
        import torch
        from PIL import Image
        from pycocotools.coco import COCO

        from modelxray.data.digit_canvases import VisionTaskData

        spec = self.read()
        coco = COCO()
        coco.dataset = spec
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):
            coco.createIndex()
        names = {c["id"]: str(c.get("name", c["id"])) for c in spec["categories"]}
        by_name = {str(k).lower(): int(v) for k, v in (label2id or {}).items()}
        label_of = {cid: by_name.get(name.lower(), cid) for cid, name in names.items()}
        background = next((by_name[n] for n in BACKGROUND_NAMES if n in by_name), -1)  # -1: not scored
        ids = sorted(img["id"] for img in spec["images"] if coco.getAnnIds(imgIds=img["id"]))
        if self.max_images is not None:
            ids = ids[: self.max_images]
        if not ids:
            raise ConfigError("annotations", f"{self.annotations_path()} annotates no image")
        mode = "RGB" if channels == 3 else "L"
        images, boxes, labels, masks, first = [], [], [], [], []
        root = Path(os.path.expanduser(self.root))
        for image_id in ids:
            info = coco.imgs[image_id]
            path = root / info["file_name"]
            if not path.is_file():
                raise ConfigError("root", f"image {info['file_name']!r} of the annotations is not in {root}")
            im = read_image(path, "dataset.root", mode)
            w, h = im.size
            pixels = np.asarray(im.resize((canvas_size, canvas_size)), dtype=np.float32) / 255
            sx, sy = canvas_size / w, canvas_size / h
            anns = coco.loadAnns(coco.getAnnIds(imgIds=image_id))
            mask = np.full((h, w), background, dtype=np.int64)
            b, lab = [], []
            for a in anns:
                x, y, bw, bh = a["bbox"]
                b.append([x * sx, y * sy, (x + bw) * sx, (y + bh) * sy])
                lab.append(label_of[a["category_id"]])
                if a.get("segmentation"):
                    on = coco.annToMask(a).astype(bool)
                else:
                    on = np.zeros((h, w), dtype=bool)
                    on[int(y) : int(y + bh), int(x) : int(x + bw)] = True
                mask[on] = label_of[a["category_id"]]
            small = Image.fromarray(mask.astype(np.int32)).resize((canvas_size, canvas_size), Image.NEAREST)
            image = torch.from_numpy(pixels)
            images.append(image.permute(2, 0, 1) if image.dim() == 3 else image[None])
            boxes.append(torch.tensor(b, dtype=torch.float32).reshape(-1, 4))
            labels.append(torch.tensor(lab, dtype=torch.long))
            masks.append(torch.from_numpy(np.asarray(small, dtype=np.int64)))
            first.append(lab[0])
        n_obj = sum(len(x) for x in labels)
        desc = f"{len(ids)} images of {root} with {n_obj} annotated objects ({self.annotations_path().name})"
        classes = [names[c] for c in sorted(names)]
        data = VisionTaskData(
            self.name, torch.stack(images), boxes, labels, torch.stack(masks), torch.tensor(first), classes, desc
        )
        return data.hold_out(self.calibration_images)
