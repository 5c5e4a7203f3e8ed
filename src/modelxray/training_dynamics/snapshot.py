"""Parameter snapshots on the CPU, and the change since one, computed tensor by tensor.

The monitor keeps exactly one copy of the trainable parameters (in ``snapshot_dtype``); a delta is
never materialised for the whole model at once: computers walk the parameters and form each
tensor's change on demand, so memory stays at one model plus one snapshot plus one tensor.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import nn

from modelxray.training_dynamics.naming import Part, parts

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class DynamicsError(RuntimeError):
    """The monitor cannot measure (e.g. the parameters changed names since the snapshot)."""


def trainable(model: nn.Module) -> Iterator[tuple[str, nn.Parameter]]:
    for name, p in model.named_parameters():
        if p.requires_grad:
            yield name, p


class Snapshot:
    """CPU copies of the trainable parameters at ``step``, their squared norms per part, and a fixed
    random sample of element positions per tensor (quantiles of |dW| are read on that sample)."""

    def __init__(self, model: nn.Module, step: int, dtype: str = "float32", quantile_sample: int = 0, seed: int = 0):
        self.step = step
        self.dtype = DTYPES[dtype]
        self.tensors: dict[str, torch.Tensor] = {}
        self.parts: dict[str, list[Part]] = {}
        self.norm_sq: dict[tuple[str, int], float] = {}
        with torch.no_grad():
            for name, p in trainable(model):
                t = p.detach().to(device="cpu", dtype=self.dtype, copy=True)
                self.tensors[name] = t
                self.parts[name] = parts(name, tuple(t.shape))
                for i, part in enumerate(self.parts[name]):
                    v = part.take(t).float()
                    self.norm_sq[(name, i)] = float(torch.linalg.vector_norm(v, dtype=torch.float64) ** 2)
        self.numel = sum(t.numel() for t in self.tensors.values())
        self.sample: dict[str, torch.Tensor] = {}
        if quantile_sample and self.numel:
            gen = torch.Generator().manual_seed(seed)
            for name, t in self.tensors.items():
                k = max(1, math.ceil(quantile_sample * t.numel() / self.numel))
                # a model smaller than the sample is read whole, so its quantiles are exact
                self.sample[name] = (
                    torch.arange(t.numel())
                    if quantile_sample >= self.numel
                    else torch.randint(0, t.numel(), (k,), generator=gen)
                )

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    def check(self, model: nn.Module) -> None:
        names = [n for n, _ in trainable(model)]
        if set(names) != set(self.tensors):
            missing = sorted(set(self.tensors) - set(names))[:3]
            new = sorted(set(names) - set(self.tensors))[:3]
            raise DynamicsError(
                f"the model's trainable parameters changed since the snapshot at step {self.step} "
                f"(gone: {missing or 'none'}, new: {new or 'none'}); call monitor.reset() after changing "
                "the architecture or which parameters train"
            )
        for name, p in trainable(model):
            if tuple(p.shape) != tuple(self.tensors[name].shape):
                raise DynamicsError(
                    f"parameter {name} changed shape since the snapshot at step {self.step} "
                    f"({tuple(self.tensors[name].shape)} -> {tuple(p.shape)}); call monitor.reset()"
                )


def pairs(model: nn.Module, snapshot: Snapshot) -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, current, snapshot) per trainable tensor, both float32 on the parameter's device; one
    tensor at a time."""
    for name, p in trainable(model):
        cur = p.detach()
        snap = snapshot.tensors[name].to(device=cur.device, dtype=torch.float32, non_blocking=True)
        yield name, cur.float(), snap


def delta(model: nn.Module, snapshot: Snapshot, name: str) -> torch.Tensor:
    """The change of one parameter since the snapshot (a new float32 tensor)."""
    p = dict(model.named_parameters())[name].detach()
    return p.float() - snapshot.tensors[name].to(device=p.device, dtype=torch.float32)
