"""Noise on weights: Gaussian noise scaled to each tensor's std, and uniform noise the size of a
b-bit quantization step (the additive model of rounding error). Each tensor's noise is drawn on the
CPU from its own generator, seeded by the run's draw and the tensor's name, so a seed gives the same
noise on any device, whichever other tensors are noised and in whatever order they are read (a model
streamed block by block draws the noise an in-memory one does: ``StreamedNoise``)."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.parametrize import is_parametrized

from modelxray.quant.targets import _is_conv1d, find_targets

NOISE_TARGETS = ("linear", "matrices", "all")  # decoder linear weights | every >=2-D tensor | every tensor
STEP_GRANULARITY = ("channel", "tensor")


@dataclass
class NoiseTarget:
    name: str
    param: torch.Tensor
    channel_dim: int | None  # the output-channel dim for per-channel ranges; None: whole tensor


def noise_targets(model: nn.Module, which: str) -> list[NoiseTarget]:
    """``linear``: weights of the linear and convolution layers (no embedding, no output head, no
    norms or biases; no weight computed by a parametrization, such as Wav2Vec2's weight-normed
    positional convolution, whose stored tensors are not a weight matrix);
    ``matrices``: every parameter with >= 2 dims (embeddings included); ``all``: every parameter."""
    if which not in NOISE_TARGETS:
        raise ValueError(f"unknown noise target set {which!r}; expected one of {NOISE_TARGETS}")
    conv1d = {id(m.weight) for m in model.modules() if _is_conv1d(m)}
    if which == "linear":
        linear = {id(t.module) for t in find_targets(model) if t.is_linear}
        return [
            NoiseTarget(f"{name}.weight", m.weight, 1 if id(m.weight) in conv1d else 0)
            for name, m in model.named_modules()
            if (id(m) in linear or isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Conv3d)))
            and not is_parametrized(m, "weight")
        ]
    out = []
    for name, p in model.named_parameters():  # shared (tied) parameters are listed once
        if p.dim() >= 2:
            out.append(NoiseTarget(name, p, 1 if id(p) in conv1d else 0))
        elif which == "all":
            out.append(NoiseTarget(name, p, None))
    return out


def gaussian_noise(w: torch.Tensor, level: float, generator: torch.Generator) -> torch.Tensor:
    """N(0, (level * std(w))^2) noise shaped like ``w``."""
    noise = torch.randn(w.shape, generator=generator, dtype=torch.float32)
    return (noise * (w.float().std() * level).cpu()).to(w.device, w.dtype) if w.numel() > 1 else torch.zeros_like(w)


def quant_step(w: torch.Tensor, bits: int, channel_dim: int | None, granularity: str = "channel") -> torch.Tensor:
    """The step of an asymmetric min-max ``bits`` grid: (max - min) / (2^bits - 1), per output channel
    (broadcastable to ``w``) or for the whole tensor."""
    w = w.float()
    if granularity == "tensor" or channel_dim is None or w.dim() < 2:
        return (w.max() - w.min()) / (2**bits - 1)
    dims = [d for d in range(w.dim()) if d != channel_dim]
    return (w.amax(dim=dims, keepdim=True) - w.amin(dim=dims, keepdim=True)) / (2**bits - 1)


def quant_step_noise(
    w: torch.Tensor, bits: int, generator: torch.Generator, channel_dim: int | None, granularity: str = "channel"
) -> torch.Tensor:
    """U(-step/2, step/2) noise shaped like ``w``: the error of rounding to a ``bits`` grid, without the grid."""
    u = torch.rand(w.shape, generator=generator, dtype=torch.float32) - 0.5
    return (u * quant_step(w, bits, channel_dim, granularity).cpu()).to(w.device, w.dtype)


def tensor_generator(generator: torch.Generator, name: str) -> torch.Generator:
    """The generator of one tensor's noise: the draw's seed and the tensor's name."""
    return torch.Generator().manual_seed((generator.initial_seed() * 1_000_003 + zlib.crc32(name.encode())) % 2**63)


def add_gaussian_noise_(targets: list[NoiseTarget], level: float, generator: torch.Generator) -> None:
    with torch.no_grad():
        for t in targets:
            t.param.add_(gaussian_noise(t.param, level, tensor_generator(generator, t.name)))


def add_quant_step_noise_(
    targets: list[NoiseTarget], bits: int, generator: torch.Generator, granularity: str = "channel"
) -> None:
    with torch.no_grad():
        for t in targets:
            step = quant_step_noise(t.param, bits, tensor_generator(generator, t.name), t.channel_dim, granularity)
            t.param.add_(step)


class StreamedNoise:
    """Noise on a model streamed block by block (``models.block_stream``): each target tensor noised
    by ``add`` (``add_gaussian_noise_`` or ``add_quant_step_noise_`` with their level and draw) as its
    module is read, the same noise as in memory, tensor for tensor."""

    def __init__(self, model: nn.Module, targets: list[NoiseTarget], add: Callable[[list[NoiseTarget]], None]):
        self.model, self.targets, self.add = model, targets, add
        self.complete = False

    def touches(self, prefix: str) -> bool:
        return any(_under(t.name, prefix) for t in self.targets)

    def apply(self, prefix: str, done: dict) -> None:
        fresh = []
        for t in self.targets:
            if _under(t.name, prefix) and t.name not in done:
                param = self.model.get_parameter(t.name)
                if param.device.type != "meta":
                    fresh.append(NoiseTarget(t.name, param, t.channel_dim))
                    done[t.name] = True
        if fresh:
            self.add(fresh)


def _under(name: str, prefix: str) -> bool:
    return not prefix or name == prefix or name.startswith(prefix + ".")
