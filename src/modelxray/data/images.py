"""Image datasets fit to an image model's input: resized, and grey repeated or colour turned grey, to (C, H, W).

A model's image size comes from its config or image processor (``LoadedModel.image_shape``); the
dataset records the shape of its own images (``meta["image_shape"]``). Pixels stay in the dataset's
feature range ([0, 1]); normalisation belongs to the model (``models/hf_vision.py``).
"""

from __future__ import annotations

import dataclasses

from modelxray.core.errors import ConfigError
from modelxray.data.base import ClassificationData

LUMA = (0.299, 0.587, 0.114)  # ITU-R BT.601 weights of R, G, B: colour images to grey for a one-channel model


def fit_images(
    data: ClassificationData, shape: tuple[int, int, int], model_name: str, takes_flat: bool = True
) -> ClassificationData:
    """``data`` with every image resized (bilinear, antialiased) and its channels fit to ``shape``:
    grey repeated over a colour model's channels, colour turned grey (``LUMA``) for a grey model.
    ``takes_flat``: the model runs on flat pixels (a leading Unflatten); False: flat pixels of
    its own shape are reshaped into images (a convolutional TorchScript file)."""
    import torch
    import torch.nn.functional as F

    src = data.meta.get("image_shape")
    if src is None:
        raise ConfigError(
            "dataset",
            f"{data.name} holds feature vectors, not images; {model_name} is an image model: use dataset=digits",
        )
    src, shape = tuple(src), tuple(shape)
    if src == shape and (tuple(data.x_test.shape[1:]) == shape or takes_flat):
        return data  # already images of the model's shape, or flat pixels for a model that takes them
    # (flat vectors of the model's image shape, for a model that needs images, are reshaped below)
    to_grey = src[0] == len(LUMA) and shape[0] == 1
    if src[0] not in (1, shape[0]) and not to_grey:
        raise ConfigError("dataset", f"{data.name} has {src[0]}-channel images; {model_name} expects {shape[0]}")
    lo, hi = data.feature_range

    def fit(x):
        x = x.reshape(-1, *src)
        if to_grey:
            x = (x * torch.tensor(LUMA, dtype=x.dtype).view(1, -1, 1, 1)).sum(1, keepdim=True)
        if src[1:] != shape[1:]:
            x = F.interpolate(x, size=shape[1:], mode="bilinear", align_corners=False, antialias=True)
        return x.expand(-1, shape[0], -1, -1).clamp(lo, hi).contiguous()

    meta = {**data.meta, "image_shape": shape, **({"resized_from": src} if src != shape else {})}
    if to_grey:
        meta["colour"] = "turned grey (ITU-R BT.601 luma)"
    return dataclasses.replace(data, x_train=fit(data.x_train), x_test=fit(data.x_test), input_shape=shape, meta=meta)


def match_labels(data: ClassificationData, label2id: dict[str, int] | None, model_name: str) -> ClassificationData:
    """Labels as the model's own ids when its config names every class of ``data`` (``label2id``);
    otherwise the dataset's order stands (the report says which)."""
    names = data.meta.get("class_names")
    if not names or not label2id:
        return data
    lookup = {str(k).lower(): int(v) for k, v in label2id.items()}
    if not all(n.lower() in lookup for n in names):
        return data
    import torch

    ids = [lookup[n.lower()] for n in names]
    table = torch.tensor(ids, dtype=torch.int64)  # dataset label -> the model's id
    return dataclasses.replace(
        data,
        y_train=table[data.y_train],
        y_test=table[data.y_test],
        n_classes=max(ids) + 1,
        meta={**data.meta, "labels": f"matched by name to {model_name}'s label ids"},
    )
