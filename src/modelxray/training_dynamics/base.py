"""The metric-computer plugin contract: ``compute(delta, snapshot, context) -> dict``.

Computers are pure and stateless: everything they need arrives in the arguments, so one instance
can serve many monitors and a user adds their own with ``monitor.add_metric(obj)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from modelxray.training_dynamics import snapshot as snap_mod
from modelxray.training_dynamics.snapshot import Snapshot

SPARSE_BELOW = 1e-8  # |dW| at most this counts as unchanged in ``ParameterDelta.sparsity``


@dataclass(frozen=True, eq=False)
class ParameterDelta:
    """The change of every trainable parameter since a snapshot, formed tensor by tensor on demand.

    Immutable (a frozen dataclass over an immutable ``Snapshot``). Its own statistics over every
    trainable tensor (``norm_l2``, ``norm_l1``, ``norm_max``, ``relative_change`` = ||dW|| / ||W0||,
    ``sparsity`` = the share of weights with |dW| <= ``SPARSE_BELOW``) are computed in one pass the
    first time one is read, with the same functions as ``ParameterChangeMetrics``; read them before
    the model trains on, as they describe the model as it is then."""

    model: nn.Module
    snapshot: Snapshot
    steps: int  # optimizer steps since the snapshot

    @cached_property
    def _stats(self) -> dict[str, float]:
        from modelxray.training_dynamics.change_stats import FIXED, N, combine, part_stats, summarize

        with torch.no_grad():
            rows = [part_stats(cur, snap, [SPARSE_BELOW]) for _, cur, snap in self.pairs()]
        if not rows:
            return {"norm_l2": 0.0, "norm_l1": 0.0, "norm_max": 0.0, "relative_l2": 0.0, "sparsity": 1.0}
        total = combine(rows)
        out = summarize(total, sum(self.snapshot.norm_sq.values()))
        out["sparsity"] = float(total[FIXED]) / float(total[N])
        return out

    @property
    def norm_l2(self) -> float:
        return self._stats["norm_l2"]

    @property
    def norm_l1(self) -> float:
        return self._stats["norm_l1"]

    @property
    def norm_max(self) -> float:
        return self._stats["norm_max"]

    @property
    def relative_change(self) -> float:
        """||dW||_2 / ||W0||_2 over every trainable tensor."""
        return self._stats["relative_l2"]

    @property
    def sparsity(self) -> float:
        """The share of trainable weights that moved by at most ``SPARSE_BELOW``."""
        return self._stats["sparsity"]

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
