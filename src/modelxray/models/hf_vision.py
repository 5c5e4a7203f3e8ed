"""Hugging Face image classifiers as plain ``pixels -> logits`` modules.

Every classifier path in modelxray (robustness attacks, accuracy, per-module time) calls
``model(x)`` with ``x`` of shape (N, C, H, W) in [0, 1]. The image processor's normalisation lives
inside the wrapper, so attacks stay in pixel space, inside the valid pixel range.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from modelxray.core.errors import ConfigError


class PixelClassifier(nn.Module):
    """``net(pixel_values=(x - mean) / std).logits`` for pixels ``x`` in [0, 1]."""

    def __init__(self, net: nn.Module, mean: list[float], std: list[float], image_shape: tuple[int, int, int]):
        super().__init__()
        self.net = net
        self.image_shape = tuple(image_shape)  # (channels, height, width) the model expects
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(-1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(-1, 1, 1), persistent=False)

    @property
    def config(self):
        return self.net.config

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x - self.mean.to(x)) / self.std.to(x)
        return self.net(pixel_values=x).logits


class ToImage(nn.Module):
    """Flat pixels (N, C*H*W), as the digits dataset stores them, or images (N, C, H, W) (another image
    dataset fit to this model's input) as the images the layers after it take. No weights: a
    checkpoint saved with ``nn.Unflatten`` in its place loads unchanged."""

    def __init__(self, image_shape: tuple[int, int, int]):
        super().__init__()
        self.image_shape = tuple(image_shape)

    def forward(self, x):
        return x.reshape(x.shape[0], *self.image_shape)

    def extra_repr(self) -> str:
        return f"image_shape={self.image_shape}"


def processor_settings(path: str, kwargs: dict | None = None) -> dict[str, Any]:
    """The image processor's saved settings (``image_mean``, ``image_std``, ``do_normalize``, ``size``)
    wherever AutoImageProcessor finds them: ``preprocessor_config.json``, or the ``image_processor`` of
    a transformers 5 ``processor_config.json``; {} when there are none. The saved values only, not a
    processor class's defaults, so a size the model never named is not guessed."""
    from transformers import ImageProcessingMixin

    try:
        settings, _ = ImageProcessingMixin.get_image_processor_dict(path, **(kwargs or {}))
    except (OSError, ValueError):  # none saved (or unreadable): the pixels are fed as they are, and the notes say so
        return {}
    return dict(settings) if isinstance(settings, dict) else {}


def _size_of(size: Any) -> int | None:
    if isinstance(size, int):
        return size
    if isinstance(size, dict):
        return size.get("height") or size.get("shortest_edge")
    return None


def image_shape_of(config: Any, processor: dict[str, Any], override: int | None, name: str) -> tuple[int, int, int]:
    """(channels, height, width) from ``model.image_size``, the config, or the image processor."""
    channels = int(getattr(config, "num_channels", 3))
    size = override or getattr(config, "image_size", None) or _size_of(processor.get("size"))
    if isinstance(size, (list, tuple)):
        size = size[0]
    if not size:
        raise ConfigError(
            "model.image_size",
            f"{name} names no image size (no image_size in its config, no image processor's size); "
            "set model.image_size=224 (or the size it was trained at)",
        )
    return channels, int(size), int(size)


def normalisation(processor: dict[str, Any], channels: int) -> tuple[list[float], list[float], list[str]]:
    """The per-channel mean and std the image processor applies to pixels in [0, 1] (none where it
    says ``do_normalize: false``, as RT-DETR's does), and the notes a report shows about it."""
    if processor.get("do_normalize") is False:
        return [0.0] * channels, [1.0] * channels, []
    if "image_mean" not in processor:
        note = "No image processor found: pixels are fed in [0, 1] without normalisation."
        return [0.0] * channels, [1.0] * channels, [note]
    mean, std = list(processor["image_mean"]), list(processor["image_std"])
    if len(mean) != channels:
        mean, std = [mean[0]] * channels, [std[0]] * channels
    return mean, std, []


def wrap_image_classifier(
    net: nn.Module, path: str, image_size: int | None, name: str, kwargs: dict | None = None
) -> tuple[PixelClassifier, list]:
    """The wrapped model and the notes a report shows about its inputs."""
    processor = processor_settings(path, kwargs)
    shape = image_shape_of(net.config, processor, image_size, name)
    mean, std, notes = normalisation(processor, shape[0])
    return PixelClassifier(net, mean, std, shape), notes
