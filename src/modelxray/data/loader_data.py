"""A user's DataLoader of (images, labels) as the classification split the analyzers score.

A classifier's analyzers (performance, robustness, bitwidth, quant_impact) work on a
``ClassificationData``: its test split is what they evaluate. A DataLoader handed to
``modelxray.analyze(..., dataloader=...)`` or ``ModelAnalyzer`` for an image classifier is read once
into that form: every batch's inputs and labels, in order. Its observed value range stands for the
features' range (robustness clips attacked inputs to it). There is no training split: quantizers
that calibrate (GPTQ, AWQ) need a configured dataset.
"""

from __future__ import annotations

import torch

from modelxray.core.errors import ConfigError
from modelxray.data.base import ClassificationData

INPUT_KEYS = ("pixel_values", "images", "image", "x", "inputs", "input")
LABEL_KEYS = ("labels", "label", "y", "targets", "target")
EXPECTED = "(inputs, labels) pairs, or mappings with pixel_values/images/x and labels/y"


def _pair(batch, key: str) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(batch, dict):
        x = next((batch[k] for k in INPUT_KEYS if k in batch), None)
        y = next((batch[k] for k in LABEL_KEYS if k in batch), None)
    elif isinstance(batch, (list, tuple)) and len(batch) >= 2:
        x, y = batch[0], batch[1]
    else:
        x = y = None
    if x is None or y is None:
        shown = sorted(batch) if isinstance(batch, dict) else type(batch).__name__
        raise ConfigError(key, f"yields {shown}; a classifier's DataLoader yields {EXPECTED}")
    x, y = torch.as_tensor(x), torch.as_tensor(y)
    if not x.is_floating_point() or y.is_floating_point() or y.dim() != 1 or x.shape[0] != y.shape[0]:
        raise ConfigError(
            key,
            f"yields inputs {tuple(x.shape)} {x.dtype} and labels {tuple(y.shape)} {y.dtype}; expected float "
            "inputs (batch first) and one integer label per input",
        )
    return x.float(), y.long()


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
