"""Your own labelled scenes in COCO format: a folder of images and an ``instances.json`` (COCO's
``images``, ``annotations`` with ``bbox`` [x, y, w, h] and optional ``segmentation``, and
``categories``), for detectors and semantic segmenters.

Each image is resized to the model's square input size when read, its boxes scaled alike. A
category becomes the model's label id when the model's config names it (``label2id``, matched
without case), else its COCO ``category_id``. Masks are the annotations' polygons or RLEs drawn by
pycocotools (``annToMask``), each pixel labelled with its category's label, as the segmenter's class
maps count; an annotation without a segmentation fills its box. Pixels no annotation covers are the
model's background class when it names one (``background``, ``__background__``, ``unlabeled``), else
not scored: COCO leaves unannotated whatever it does not name.

Checked before the model loads (``check_source``): the file is a COCO object, every annotation names
an image and a category there and has a box of four numbers inside its image (one pixel of rounding
allowed, clipped), every RLE mask has its image's size, and every image file opens with the size the
file declares. Each failure is one line naming ``dataset.annotations`` (the entry) or ``dataset.root``
(the image). A box of zero width or height marks nothing: it is dropped, and the count is in the
data's ``meta["dropped"]`` and its description."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from modelxray.core.configurable import Configurable
from modelxray.core.errors import ConfigError
from modelxray.core.schema import REQUIRED
from modelxray.data.image_files import IMAGE_ERRORS, read_image, unreadable
from modelxray.data.source_checks import KindsThatRead, check_held_out, dataset_keys

BACKGROUND_NAMES = ("background", "__background__", "unlabeled", "unlabelled")
ROUNDING_PX = 1.0  # how far a box may reach past its image's edge (a tool's rounding) before it is refused
BBOX_FORM = "COCO's bbox is [x, y, width, height] in pixels of its image"


@dataclass
class Checked:
    """The annotations file as checked: every image's ``width`` and ``height`` filled in from its file,
    the zero-size boxes left out (``dropped`` counts them), ``ids`` the scored images in id order."""

    spec: dict[str, Any]
    ids: list[int]
    dropped: dict[str, int]


@dataclass
class CocoFolder(KindsThatRead, Configurable):
    modality: ClassVar[str] = "images"  # what its examples are: a model of another kind cannot use them
    kinds: ClassVar[tuple[str, ...]] = ("object_detection", "semantic_segmentation")
    holds: ClassVar[str] = "labelled scenes (COCO boxes and masks)"
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
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError("annotations", f"{where} is not readable JSON: {exc}") from None
        if not isinstance(spec, dict):
            raise ConfigError(
                "annotations",
                f"{where} holds a JSON {type(spec).__name__}, not an object: a COCO instances file is "
                '{"images": [...], "annotations": [...], "categories": [...]}',
            )
        for key in ("images", "annotations", "categories"):
            if not isinstance(spec.get(key), list):
                raise ConfigError("annotations", f"{where} has no {key!r} list: is it a COCO instances file?")
        return spec

    def check_source(self) -> None:
        """The annotations and the images they name, before the model loads: a bad entry or image is
        one line, not a traceback once the weights are in memory."""
        with dataset_keys():
            check_held_out(self.calibration_images, len(self.checked().ids))

    def checked(self) -> Checked:
        """The annotations file and the files it names, checked once per dataset object."""
        if getattr(self, "_checked", None) is None:
            root = Path(os.path.expanduser(self.root))
            self._checked = _check(self.read(), self.annotations_path(), root, self.max_images)
        return self._checked

    def load(
        self,
        tokenizer=None,
        canvas_size: int = 224,
        channels: int = 3,
        label2id: dict | None = None,
        n_classes: int | None = None,
    ):
        """The images at ``canvas_size`` with their boxes, labels and masks, labels mapped through the
        model's ``label2id``; with ``n_classes`` (the model's), a category that maps to no class of the
        model is one line: scored, it would count as a class the model never predicts."""
        with dataset_keys():
            data = self._load(canvas_size, channels, label2id, n_classes)
        return data.hold_out(self.calibration_images)

    def _load(self, canvas_size: int, channels: int, label2id: dict | None, n_classes: int | None):
        import contextlib
        import io

        import torch
        from pycocotools.coco import COCO

        from modelxray.data.digit_canvases import VisionTaskData

        checked = self.checked()
        spec, ids = checked.spec, checked.ids
        coco = COCO()
        coco.dataset = spec
        with contextlib.redirect_stdout(io.StringIO()):
            coco.createIndex()
        names = {c["id"]: str(c.get("name", c["id"])) for c in spec["categories"]}
        by_name = {str(k).lower(): int(v) for k, v in (label2id or {}).items()}
        label_of = {cid: by_name.get(name.lower(), cid) for cid, name in names.items()}
        background = next((by_name[n] for n in BACKGROUND_NAMES if n in by_name), -1)  # -1: not scored
        if n_classes is not None:
            scored = set(ids)
            used = {a["category_id"] for a in spec["annotations"] if a["image_id"] in scored}
            _check_classes(names, label_of, used, n_classes)
        mode = "RGB" if channels == 3 else "L"
        images, boxes, labels, masks, first = [], [], [], [], []
        root = Path(os.path.expanduser(self.root))
        for image_id in ids:
            image, b, lab, mask = _scene(coco, image_id, root, mode, canvas_size, label_of, background)
            images.append(image)
            boxes.append(torch.tensor(b, dtype=torch.float32).reshape(-1, 4))
            labels.append(torch.tensor(lab, dtype=torch.long))
            masks.append(mask)
            first.append(lab[0])
        n_obj = sum(len(x) for x in labels)
        desc = f"{len(ids)} images of {root} with {n_obj} annotated objects ({self.annotations_path().name})"
        desc += "".join(f"; {what} dropped: {n}" for what, n in checked.dropped.items())
        classes = [names[c] for c in sorted(names)]
        data = VisionTaskData(
            self.name, torch.stack(images), boxes, labels, torch.stack(masks), torch.tensor(first), classes, desc
        )
        if checked.dropped:
            data.meta["dropped"] = dict(checked.dropped)
        return data


def _check_classes(names: dict, label_of: dict, used: set, n_classes: int) -> None:
    """Every annotated category is a class of the model: its name in the model's labels, or an id
    below ``n_classes``."""
    stray = [f"{names[c]!r} (id {c})" for c in sorted(used) if not 0 <= label_of[c] < n_classes]
    if stray:
        raise ConfigError(
            "annotations",
            f"categories {', '.join(stray[:6])} are none of the model's {n_classes} classes by name (its label2id) "
            f"nor by id (0 to {n_classes - 1}): rename them as the model's labels, or leave their annotations out",
        )


def _scene(coco, image_id: int, root: Path, mode: str, canvas_size: int, label_of: dict, background: int):
    """One image at ``canvas_size``: its pixels (C, H, W), boxes (xyxy, scaled and clipped to the
    image), labels, and mask of label ids."""
    import numpy as np
    import torch
    from PIL import Image

    info = coco.imgs[image_id]
    im = read_image(root / info["file_name"], "dataset.root", mode)
    w, h = im.size
    pixels = np.asarray(im.resize((canvas_size, canvas_size)), dtype=np.float32) / 255
    sx, sy = canvas_size / w, canvas_size / h
    mask = np.full((h, w), background, dtype=np.int64)
    b, lab = [], []
    for a in coco.loadAnns(coco.getAnnIds(imgIds=image_id)):
        x, y, bw, bh = a["bbox"]
        x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + bw, w), min(y + bh, h)  # a rounding's reach clipped
        b.append([x0 * sx, y0 * sy, x1 * sx, y1 * sy])
        lab.append(label_of[a["category_id"]])
        if a.get("segmentation"):
            on = coco.annToMask(a).astype(bool)
        else:
            on = np.zeros((h, w), dtype=bool)
            on[int(y0) : int(math.ceil(y1)), int(x0) : int(math.ceil(x1))] = True
        mask[on] = label_of[a["category_id"]]
    small = Image.fromarray(mask.astype(np.int32)).resize((canvas_size, canvas_size), Image.NEAREST)
    image = torch.from_numpy(pixels)
    image = image.permute(2, 0, 1) if image.dim() == 3 else image[None]
    return image, b, lab, torch.from_numpy(np.asarray(small, dtype=np.int64))


# -- the checks -------------------------------------------------------------------------------------
def _check(spec: dict[str, Any], where: Path, root: Path, max_images: int | None) -> Checked:
    """``spec`` checked against itself and the files of the first ``max_images`` annotated images
    (see the module's docstring)."""
    categories = _ids_of(spec["categories"], "categories", where)
    images = _ids_of(spec["images"], "images", where)
    kept = []  # (index in the file, annotation) of each box of nonzero size
    for i, ann in enumerate(spec["annotations"]):
        _check_annotation(ann, i, where, images, categories)
        if ann["bbox"][2] > 0 and ann["bbox"][3] > 0:
            kept.append((i, ann))
    ids = sorted({ann["image_id"] for _, ann in kept})[:max_images]
    if not ids:
        raise ConfigError("annotations", f"{where} annotates no image with a box of nonzero size")
    for image_id in ids:
        _check_image_file(images[image_id], where, root)
    scored = set(ids)
    for i, ann in kept:
        if ann["image_id"] in scored:
            _check_geometry(ann, i, where, images[ann["image_id"]])
    zero = sum(  # of the images considered: every one, or the scored ones under max_images
        1
        for ann in spec["annotations"]
        if min(ann["bbox"][2:]) == 0 and (max_images is None or ann["image_id"] in scored)
    )
    checked = {**spec, "annotations": [ann for _, ann in kept]}
    return Checked(checked, ids, {"zero-size boxes": zero} if zero else {})


def _ids_of(entries: list, key: str, where: Path) -> dict[Any, dict]:
    """``images`` or ``categories`` by their ``id``; an entry that is no object with an id, or an id
    given twice, is one line."""
    out: dict[Any, dict] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not _is_id(entry.get("id")):
            raise ConfigError("annotations", f"{where}: {key}[{i}] has no integer 'id': give each entry one")
        if entry["id"] in out:
            raise ConfigError("annotations", f"{where}: {key}[{i}] repeats id {entry['id']}: give each entry its own")
        if key == "images" and not isinstance(entry.get("file_name"), str):
            raise ConfigError("annotations", f"{where}: images[{i}] (id {entry['id']}) has no 'file_name'")
        out[entry["id"]] = entry
    return out


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _named(ann: Any, i: int) -> str:
    """``annotations[3] (id 17)``: an annotation as the line names it."""
    ann_id = ann.get("id") if isinstance(ann, dict) else None
    return f"annotations[{i}]" + (f" (id {ann_id})" if ann_id is not None else "")


def _check_annotation(ann: Any, i: int, where: Path, images: dict, categories: dict) -> None:
    """An annotation names an image and a category the file has, and a box of four numbers whose
    width and height are not negative."""
    if not isinstance(ann, dict):
        raise ConfigError("annotations", f"{where}: {_named(ann, i)} is no object: write {{'image_id': ..., ...}}")
    if ann.get("image_id") not in images:
        raise ConfigError(
            "annotations",
            f"{where}: {_named(ann, i)} names image_id {ann.get('image_id')!r}, which no entry of 'images' has: "
            "fix the id or add the image",
        )
    if ann.get("category_id") not in categories:
        known = ", ".join(map(str, sorted(categories, key=str)[:12]))
        raise ConfigError(
            "annotations",
            f"{where}: {_named(ann, i)} names category_id {ann.get('category_id')!r}, which 'categories' lacks "
            f"(its ids: {known}): fix the id or add the category",
        )
    bbox = ann.get("bbox")
    if not (isinstance(bbox, list) and len(bbox) == 4 and all(_is_number(v) for v in bbox)):
        raise ConfigError("annotations", f"{where}: {_named(ann, i)} has bbox {bbox!r}: {BBOX_FORM}")
    if bbox[2] < 0 or bbox[3] < 0:
        raise ConfigError(
            "annotations", f"{where}: {_named(ann, i)} has bbox {bbox} of negative width or height: {BBOX_FORM}"
        )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_image_file(info: dict, where: Path, root: Path) -> None:
    """The image opens (headers only, as ``check_image_files`` reads them) with the width and height
    the annotations give it; missing ones are filled in from the file (pycocotools draws masks at
    that size)."""
    from PIL import Image

    path = root / info["file_name"]
    if not path.is_file():
        raise ConfigError(
            "root", f"image {info['file_name']!r} (image id {info['id']} of {where.name}) is not in {root}"
        )
    try:
        with Image.open(path) as im:
            size = im.size
            im.verify()  # a PNG's chunks and checksums too: a cut copy is found now
    except IMAGE_ERRORS as exc:
        raise ConfigError("root", unreadable(path, exc)) from None
    declared = (info.get("width"), info.get("height"))
    if declared != (None, None) and declared != size:
        raise ConfigError(
            "annotations",
            f"{where}: image id {info['id']} is {declared[0]} x {declared[1]} pixels there, and {path} is "
            f"{size[0]} x {size[1]}: fix its width and height, or the file",
        )
    info["width"], info["height"] = size


def _check_geometry(ann: dict, i: int, where: Path, info: dict) -> None:
    """The box lies inside its image (``ROUNDING_PX`` of slack), and an RLE mask has the image's size."""
    w, h = info["width"], info["height"]
    x, y, bw, bh = ann["bbox"]
    if x < -ROUNDING_PX or y < -ROUNDING_PX or x + bw > w + ROUNDING_PX or y + bh > h + ROUNDING_PX:
        raise ConfigError(
            "annotations",
            f"{where}: {_named(ann, i)} has bbox {ann['bbox']}, which reaches outside its image "
            f"{info['file_name']} ({w} x {h} pixels): {BBOX_FORM}",
        )
    segmentation = ann.get("segmentation")
    if isinstance(segmentation, dict) and list(segmentation.get("size", ())) != [h, w]:
        raise ConfigError(
            "annotations",
            f"{where}: {_named(ann, i)} has an RLE mask of size {segmentation.get('size')!r} (height, width), "
            f"and its image {info['file_name']} is {h} x {w}: a mask covers its own image",
        )
    if segmentation is not None and not isinstance(segmentation, (dict, list)):
        raise ConfigError(
            "annotations",
            f"{where}: {_named(ann, i)} has a segmentation that is neither polygons (a list) nor an RLE (an object)",
        )
