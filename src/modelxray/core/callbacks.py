"""The hook protocol of the one training loop, shaped like Hugging Face's ``TrainerCallback``.

Why in core: two drivers call these hooks (the loop in ``modelxray.training`` and the checkpoint
replay of ``analyzer=learning_dynamics``) and plug-ins implement them (the learning-dynamics
callbacks in ``modelxray.learning_dynamics``, the loop's weight-dynamics monitor). Kept here, the plug-ins
depend on this small module and not on the loop, so imports run one way: training -> learning ->
core. ``modelxray.training.callbacks`` re-exports it as the public path.

Hooks are named after the moment they run and receive the loop's state. A hook may return a dict
of metrics; the loop logs them at ``state.step`` (MLflow charts them over steps). At the end
``report()`` hands the callback's findings to the run's report as a ``Result`` part: metrics,
tables, JSON-able data and insight sentences. Callbacks never call the tracker themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn


@dataclass
class TrainState:
    """What the loop knows at a hook. Tensors are the loop's own (do not modify them).

    ``logits`` are the training forward's outputs for ``batch`` (detached), so per-example statistics
    need no second pass; ``indices`` are the dataset positions of the batch's examples (classifiers)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer | None = None
    step: int = 0  # optimizer steps done so far (1 after the first step)
    epoch: int = 0  # full passes over the training data done so far
    max_steps: int = 0
    loss: float | None = None
    lr: float | None = None
    grad_norm: float | None = None  # the global gradient norm before clipping
    clip_coef: float = 1.0  # what clipping multiplied the gradients by (1.0: not clipped)
    batch: Any = None  # the training batch of this step (a dict of tensors)
    logits: torch.Tensor | None = None
    example_loss: torch.Tensor | None = None  # per-example training loss of ``batch`` (classifiers), detached
    indices: torch.Tensor | None = None
    probe: Any = None  # a fixed held-out batch, the same at every step
    task: Any = None  # the TrainTask: loss, evaluation, data access
    extra: dict[str, Any] = field(default_factory=dict)  # what one callback leaves for the next


@dataclass
class CallbackReport:
    """A callback's findings for the run's report."""

    metrics: dict[str, float] = field(default_factory=dict)
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    insights: list[str] = field(default_factory=list)


class Callback:
    """Base class: override the hooks you need. Every hook may return metrics to log at ``state.step``."""

    name: str = "callback"

    def on_train_begin(self, state: TrainState) -> dict[str, float] | None:
        return None

    def on_step_end(self, state: TrainState) -> dict[str, float] | None:
        """After ``optimizer.step()`` and before gradients are zeroed (``p.grad`` is this step's)."""
        return None

    def on_epoch_end(self, state: TrainState) -> dict[str, float] | None:
        return None

    def on_train_end(self, state: TrainState) -> dict[str, float] | None:
        return None

    def report(self) -> CallbackReport:
        return CallbackReport()
