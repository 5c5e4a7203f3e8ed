"""A user's DataLoader as the data the analyzers score: (images, labels) as a classifier's
classification split; a detector's, segmenter's or backbone's batches as its scored images.

A classifier's analyzers (performance, robustness, bitwidth, quant_impact) work on a
``ClassificationData``: its test split is what they evaluate. A DataLoader handed to
``modelxray.analyze(..., dataloader=...)`` or ``ModelAnalyzer`` for an image classifier is read once
into that form: every batch's inputs and labels, in order. Its observed value range stands for the
features' range (robustness clips attacked inputs to it). There is no training split: quantizers
that calibrate (GPTQ, AWQ) need a configured dataset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from modelxray.core.errors import ConfigError
from modelxray.data.base import ClassificationData

INPUT_KEYS = ("pixel_values", "images", "image", "x", "inputs", "input")
LABEL_KEYS = ("labels", "label", "y", "targets", "target")
EXPECTED = "(inputs, labels) pairs, or mappings with pixel_values/images/x and labels/y"


def _pair(batch, key: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch's (inputs, labels): a mapping's (a dict, a ``BatchFeature``, a ``datasets`` batch)
    named ones, or a list's or tuple's first two (a third and more, such as indices or paths, unread)."""
    if isinstance(batch, Mapping):
        x = next((batch[k] for k in INPUT_KEYS if k in batch), None)
        y = next((batch[k] for k in LABEL_KEYS if k in batch), None)
    elif isinstance(batch, (list, tuple)) and len(batch) >= 2:
        x, y = batch[0], batch[1]
    else:
        x = y = None
    if x is None or y is None:
        raise ConfigError(
            key, f"yields {describe_batch(batch, items=True)}; a classifier's DataLoader yields {EXPECTED}"
        )
    x, y = _as_tensor(x, "inputs", key), _as_tensor(y, "labels", key)
    if not x.is_floating_point() or y.is_floating_point() or y.dim() != 1 or x.shape[0] != y.shape[0]:
        raise ConfigError(
            key,
            f"yields inputs {tuple(x.shape)} {x.dtype} and labels {tuple(y.shape)} {y.dtype}; expected float "
            "inputs (batch first) and one integer label per input",
        )
    return x.float(), y.long()


def _as_tensor(value, name: str, key: str) -> torch.Tensor:
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        from modelxray.metrics.token_batches import describe_items

        raise ConfigError(
            key, f"yields {name} as {describe_items(value)}; a classifier's DataLoader yields {EXPECTED}"
        ) from None


def classification_from_loader(loader, key: str = "dataloader", name: str = "your DataLoader") -> ClassificationData:
    """Every batch of ``loader`` as the test split (in order), with no training split."""
    xs, ys = zip(*(_pair(b, key) for b in loader), strict=True) if loader is not None else ((), ())
    if not xs:
        raise ConfigError(key, f"yields no batches; a classifier's DataLoader yields {EXPECTED}")
    x, y = torch.cat(xs), torch.cat(ys)
    if int(y.min()) < 0:
        raise ConfigError(key, f"has a negative label ({int(y.min())}); labels are class indices 0..K-1")
    shape = tuple(x.shape[1:])
    return ClassificationData(
        name=name,
        x_train=x.new_zeros((0, *shape)),
        y_train=y.new_zeros(0),
        x_test=x,
        y_test=y,
        n_classes=int(y.max()) + 1,
        feature_range=(float(x.min()), float(x.max())),
        input_shape=shape,
        meta={"source": "user DataLoader", **({"image_shape": shape} if len(shape) == 3 else {})},
    )


class BoxTargets:
    """A detector's targets: a list of {'boxes', 'labels'} per image."""

    noun = "detector"
    expected = (
        "(images, targets) with targets a list of {'boxes': (k, 4) xyxy pixels, 'labels': (k,)} "
        "per image, as torchvision's detection datasets give"
    )

    def check(self, y: Any, key: str) -> None:
        if not (isinstance(y, (list, tuple)) and all(isinstance(t, dict) and "boxes" in t for t in y)):
            raise ConfigError(key, f"yields targets of type {type(y).__name__}; expected {self.expected}")

    def read(self, target: Any, n: int, height: int, width: int, sx: float, sy: float):
        """(boxes, labels, masks, image labels) of one batch of ``n`` images resized by (sx, sy)."""
        boxes, labels = [], []
        for t in target:
            b = torch.as_tensor(t["boxes"], dtype=torch.float32).reshape(-1, 4)
            boxes.append(b * torch.tensor([sx, sy, sx, sy]))
            labels.append(torch.as_tensor(t.get("labels", t.get("class_labels")), dtype=torch.long).reshape(-1))
        image_labels = torch.tensor([int(lab[0]) if len(lab) else 0 for lab in labels])
        return boxes, labels, torch.zeros(n, height, width, dtype=torch.long), image_labels


class MaskTargets:
    """A segmenter's targets: a class id per pixel."""

    noun = "segmenter"
    expected = "(images, masks) with masks (B, H, W) of class ids (-1 or 255: not scored)"

    def check(self, y: Any, key: str) -> None:
        pass

    def read(self, target: Any, n: int, height: int, width: int, sx: float, sy: float):
        import torch.nn.functional as F

        m = torch.as_tensor(target).long()
        m = m.masked_fill((m == 255) | (m < 0), -1)
        if m.shape[-2:] != (height, width):
            m = F.interpolate(m[:, None].float(), size=(height, width), mode="nearest")[:, 0].long()
        return _no_boxes(n), _no_labels(n), m, torch.tensor([most_common_class(r) for r in m])


class ImageLabelTargets:
    """A backbone's targets: one label per image (for k-NN accuracy)."""

    noun = "backbone"
    expected = "(images, labels) with one integer label per image"

    def check(self, y: Any, key: str) -> None:
        pass

    def read(self, target: Any, n: int, height: int, width: int, sx: float, sy: float):
        masks = torch.zeros(n, height, width, dtype=torch.long)
        return _no_boxes(n), _no_labels(n), masks, torch.as_tensor(target).long().reshape(-1)


def _no_boxes(n: int) -> list:
    return [torch.zeros(0, 4) for _ in range(n)]


def _no_labels(n: int) -> list:
    return [torch.zeros(0, dtype=torch.long) for _ in range(n)]


def vision_task_from_loader(loader, targets: Any, image_shape: tuple[int, int, int], key: str = "dataloader"):
    """Every batch of a detector's, segmenter's or backbone's ``loader`` (images in [0, 1], batch
    first) as the images it is scored on, resized to the model's input ``image_shape`` (boxes scaled
    alike, masks by nearest pixel); ``targets`` reads the kind's labels (``BoxTargets``,
    ``MaskTargets``, ``ImageLabelTargets``)."""
    import torch.nn.functional as F

    from modelxray.data.digit_canvases import VisionTaskData

    channels, height, width = image_shape
    images, boxes, labels, masks, image_labels = [], [], [], [], []
    for batch in loader if loader is not None else ():
        x, target = _vision_pair(batch, targets, key)
        lo, hi = float(x.min()), float(x.max())
        if lo < -0.01 or hi > 1.01:  # resizing clamps to [0, 1]: normalised pixels would be cut silently
            raise ConfigError(
                key,
                f"yields images with pixels in [{lo:.3g}, {hi:.3g}]; a {targets.noun}'s DataLoader yields pixels "
                "in [0, 1] (the model applies its processor's normalisation itself): processor(images, "
                "do_normalize=False) gives them",
            )
        if x.shape[1] != channels:
            if x.shape[1] != 1:
                raise ConfigError(key, f"yields {x.shape[1]}-channel images; the model reads {channels} channels")
            x = x.expand(-1, channels, -1, -1)
        sy, sx = height / x.shape[-2], width / x.shape[-1]
        if (sy, sx) != (1.0, 1.0):
            x = F.interpolate(x, size=(height, width), mode="bilinear", align_corners=False).clamp(0, 1)
        images.append(x)
        b, lab, m, per_image = targets.read(target, x.shape[0], height, width, sx, sy)
        boxes.extend(b)
        labels.extend(lab)
        masks.append(m)
        image_labels.append(per_image)
    if not images:
        raise ConfigError(key, f"yields no batches; a {targets.noun}'s DataLoader yields {targets.expected}")
    x = torch.cat(images)
    desc = f"{x.shape[0]} images from your DataLoader"
    if isinstance(targets, BoxTargets):
        desc += f" with {sum(len(b) for b in boxes)} labelled boxes"
    return VisionTaskData("dataloader", x, boxes, labels, torch.cat(masks), torch.cat(image_labels), [], desc)


def _vision_pair(batch, targets: Any, key: str):
    if isinstance(batch, Mapping):
        x = next((batch[k] for k in INPUT_KEYS if k in batch), None)
        y = next((batch[k] for k in (*LABEL_KEYS, "masks", "mask") if k in batch), None)
    elif isinstance(batch, (list, tuple)) and len(batch) >= 2:
        x, y = batch[0], batch[1]
    else:
        x = y = None
    if x is not None and isinstance(x, (list, tuple)):  # torchvision's detection loaders: a list of images
        x = torch.stack([torch.as_tensor(i) for i in x])
    if x is None or y is None or not torch.as_tensor(x).is_floating_point() or torch.as_tensor(x).dim() != 4:
        raise ConfigError(
            key, f"yields {describe_batch(batch, items=True)}; a {targets.noun}'s DataLoader yields {targets.expected}"
        )
    targets.check(y, key)
    return torch.as_tensor(x).float(), y


def most_common_class(mask: torch.Tensor) -> int:
    """The class of most scored pixels of a mask (-1: not scored), 0 when none is scored: an image's
    one label for a backbone's k-NN accuracy."""
    scored = mask[mask >= 0]
    return int(torch.bincount(scored).argmax()) if scored.numel() else 0


def describe_batch(batch, items: bool = False) -> str:
    """What a batch of the wrong shape is, for the one-line error: ``mappings with ['pixel_values']``,
    ``lists of 1 item(s)`` (``items``: and what they are, ``: 1 tensor (4, 1, 8, 8) float32``),
    ``tensors (4, 1, 8, 8) float32 alone``."""
    from modelxray.metrics.token_batches import describe_items

    if isinstance(batch, Mapping):
        return f"mappings with {sorted(batch)}"
    if isinstance(batch, (list, tuple)):
        shown = f"{type(batch).__name__}s of {len(batch)} item(s)"
        return f"{shown}: {describe_items(batch)}" if items and batch else shown
    if isinstance(batch, torch.Tensor):
        return f"{describe_items(batch).replace('tensor ', 'tensors ', 1)} alone"
    return type(batch).__name__
