"""Parameter snapshots, and the change since one, computed tensor by tensor.

The monitor keeps exactly one copy of the trainable parameters (in ``snapshot_dtype``, on
``snapshot_device``: the CPU, or the GPU); a delta is never materialised for the whole model at
once: computers walk the parameters and form each tensor's change on demand, so memory stays at one
model plus one snapshot plus one tensor.

A snapshot is immutable: a frozen dataclass whose mappings are read-only and whose tensors are
inference tensors, which torch refuses to change in place outside ``torch.inference_mode`` (a
computer that wrote into one would corrupt every later measurement).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

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


@dataclass(frozen=True, init=False, eq=False)
class Snapshot:
    """Copies of the trainable parameters at ``step`` (on ``device``), their squared norms per part,
    and a fixed random sample of element positions per tensor (quantiles of |dW| are read on that
    sample). Immutable: see the module docstring."""

    step: int
    dtype: torch.dtype
    device: str
    tensors: Mapping[str, torch.Tensor]
    parts: Mapping[str, list[Part]]
    norm_sq: Mapping[tuple[str, int], float]
    numel: int
    sample: Mapping[str, torch.Tensor]

    def __init__(
        self,
        model: nn.Module,
        step: int,
        dtype: str = "float32",
        quantile_sample: int = 0,
        seed: int = 0,
        device: str = "cpu",
    ):
        tensors, part_of, norm_sq = {}, {}, {}
        with torch.inference_mode():
            for name, p in trainable(model):
                t = p.detach().to(device=device, dtype=DTYPES[dtype], copy=True)
                tensors[name] = t
                part_of[name] = parts(name, tuple(t.shape))
                for i, part in enumerate(part_of[name]):
                    v = part.take(t).float()
                    norm_sq[(name, i)] = float(torch.linalg.vector_norm(v, dtype=torch.float64) ** 2)
        numel = sum(t.numel() for t in tensors.values())
        sample = {}
        if quantile_sample and numel:
            gen = torch.Generator().manual_seed(seed)
            for name, t in tensors.items():
                k = max(1, math.ceil(quantile_sample * t.numel() / numel))
                # a model smaller than the sample is read whole, so its quantiles are exact
                sample[name] = (
                    torch.arange(t.numel())
                    if quantile_sample >= numel
                    else torch.randint(0, t.numel(), (k,), generator=gen)
                )
        fields = dict(step=step, dtype=DTYPES[dtype], device=str(device), numel=numel)
        fields.update(tensors=tensors, parts=part_of, norm_sq=norm_sq, sample=sample)
        for key, value in fields.items():
            object.__setattr__(self, key, MappingProxyType(value) if isinstance(value, dict) else value)

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
