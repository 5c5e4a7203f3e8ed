"""Common image corruptions, as pure functions of an (N, C, H, W) batch: additive Gaussian noise,
Gaussian blur and occlusion by a square patch. Level 0 returns the batch itself (bit for bit).
Random draws come from a seeded CPU generator, so a seed gives the same corruption on any device.

Blur is a separable convolution with symmetric (half-sample) reflection padding: the image is
extended as if mirrored about its border, which keeps a constant image constant and each image's
mean exactly (up to float rounding), also at the borders and for kernels wider than the image."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

Bounds = tuple[float, float]


def gaussian_noise(x: torch.Tensor, sigma: float, generator: torch.Generator, bounds: Bounds) -> torch.Tensor:
    """``x`` + N(0, sigma^2) per pixel (sigma in pixel units), clipped to ``bounds``."""
    if sigma == 0:
        return x
    noise = torch.randn(x.shape, generator=generator, dtype=torch.float32)
    return (x.float() + sigma * noise.to(x.device)).clamp(*bounds).to(x.dtype)


def gaussian_kernel(sigma: float) -> torch.Tensor:
    """The normalised 1-D Gaussian of std ``sigma`` (pixels), cut at 3 sigma (radius at least 1)."""
    radius = max(1, math.ceil(3 * sigma))
    k = torch.arange(-radius, radius + 1, dtype=torch.float64)
    w = torch.exp(-0.5 * (k / sigma) ** 2)
    return (w / w.sum()).float()


def symmetric_index(n: int, radius: int, device=None) -> torch.Tensor:
    """Indices of ``radius`` pixels each side of a row of ``n``, mirrored about the border (the
    signal is extended as ``x, flip(x), x, ...``, period 2n), so any radius works."""
    i = torch.remainder(torch.arange(-radius, n + radius, device=device), 2 * n)
    return torch.where(i >= n, 2 * n - 1 - i, i)


def gaussian_blur(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """Gaussian blur of std ``sigma`` pixels of every channel of an (N, C, H, W) batch: two 1-D
    convolutions (rows, then columns) with symmetric reflection padding. sigma 0: ``x`` itself."""
    if sigma == 0:
        return x
    n, c, h, w = x.shape
    kernel = gaussian_kernel(sigma).to(x.device)
    r = (kernel.numel() - 1) // 2
    y = x.float().reshape(n * c, 1, h, w)
    y = F.conv2d(y.index_select(3, symmetric_index(w, r, x.device)), kernel.view(1, 1, 1, -1))
    y = F.conv2d(y.index_select(2, symmetric_index(h, r, x.device)), kernel.view(1, 1, -1, 1))
    return y.reshape(n, c, h, w).to(x.dtype)


def patch_size(side: float, h: int, w: int) -> tuple[int, int]:
    """Rows and columns of a patch whose side is ``side`` x the image's (at least one pixel when
    ``side`` > 0; square on a square image)."""
    if side == 0:
        return 0, 0
    return min(h, max(1, round(side * h))), min(w, max(1, round(side * w)))


def patch_positions(n: int, h: int, w: int, side: float, generator: torch.Generator) -> torch.Tensor:
    """(n, 2) top-left corners, uniform over the positions where the patch fits inside the image."""
    ph, pw = patch_size(side, h, w)
    top = torch.randint(0, h - ph + 1, (n,), generator=generator)
    left = torch.randint(0, w - pw + 1, (n,), generator=generator)
    return torch.stack([top, left], dim=1)


def occlude(x: torch.Tensor, side: float, corners: torch.Tensor, fill: float) -> torch.Tensor:
    """``x`` with a patch of ``side`` x the image side set to ``fill`` in every channel, at the
    top-left ``corners`` (one row per image, from ``patch_positions``)."""
    if side == 0:
        return x
    _, _, h, w = x.shape
    ph, pw = patch_size(side, h, w)
    top, left = (corners[:, i : i + 1].to(x.device) for i in (0, 1))
    rows = torch.arange(h, device=x.device)[None, :]
    cols = torch.arange(w, device=x.device)[None, :]
    inside = ((rows >= top) & (rows < top + ph))[:, :, None] & ((cols >= left) & (cols < left + pw))[:, None, :]
    return x.masked_fill(inside[:, None], fill)
