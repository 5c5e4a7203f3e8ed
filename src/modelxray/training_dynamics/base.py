"""The metric-computer plugin contract: ``compute(delta, snapshot, context) -> dict``.

Computers are pure and stateless: everything they need arrives in the arguments, so one instance
can serve many monitors and a user adds their own with ``monitor.add_metric(obj)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from modelxray.training_dynamics import snapshot as snap_mod
from modelxray.training_dynamics.snapshot import Snapshot


@dataclass
class ParameterDelta:
    """The change of every trainable parameter since a snapshot, formed tensor by tensor on demand."""

    model: nn.Module
    snapshot: Snapshot
    steps: int  # optimizer steps since the snapshot

    def pairs(self) -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
        """(name, current, snapshot) per trainable tensor, float32, one tensor at a time."""
        return snap_mod.pairs(self.model, self.snapshot)

    def of(self, name: str) -> torch.Tensor:
        """dW of one parameter (a new tensor)."""
        return snap_mod.delta(self.model, self.snapshot, name)


@dataclass
class MetricContext:
    model: nn.Module
    step: int
    config: Any  # DynamicsConfig
    optimizer: torch.optim.Optimizer | None = None
    lr: float | None = None
    inputs: Any = None  # this step's training batch, as the loop passed it
    probe: Any = None  # the fixed held-out batch of sparse-quality forwards
    grad_scale: float = 1.0  # the loop's clip coefficient: p.grad = raw gradient x grad_scale
    measurement: int = 1  # 1 for the first measurement of this monitor, 2 for the next ...
    final: bool = False  # the loop's last measurement (forced at the last step)
    cache: dict[str, Any] = field(default_factory=dict)  # shared by the computers of one measurement


@runtime_checkable
class MetricComputer(Protocol):
    """Any object with ``compute(delta, snapshot, context) -> {metric: number}``; subclassing is optional.

    ``name`` prefixes its metrics (``<name>/<metric>``) and names it in warnings and timings. A computer
    without a name reports its keys as returned, so they carry their own family
    (``{"gradient/total_norm": ...}``). The monitor passes the three arguments by keyword when
    ``compute`` accepts them so (``compute(self, **kwargs)`` or ``compute(self, delta, context, **kwargs)``
    take what they need), positionally otherwise.
    """

    name: str = ""

    def compute(self, delta: ParameterDelta, snapshot: Snapshot, context: MetricContext) -> dict[str, float]: ...
