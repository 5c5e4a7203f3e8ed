"""DynamicsCallback: the weight-dynamics monitor at Lightning's optimizer-step hooks, with what it
needs of the trainer's state (the run's last step, the raw gradient norm under norm clipping, a
probe batch from the trainer's loaders)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from lightning.pytorch import Callback

from modelxray.core.errors import ConfigError
from modelxray.training.lightning_callbacks._shared import _finite, _first_loader, emit
from modelxray.training_dynamics.config import DynamicsConfig
from modelxray.training_dynamics.monitor import DynamicsMonitor


def _head_rows(loader: Any, n: int) -> Any:
    """The first ``n`` rows of a loader's dataset through its collate function (None when the dataset
    has no length or no indexing): a fixed batch, drawn without iterating the loader, so no sampler
    or random state moves."""
    dataset = getattr(loader, "dataset", None)
    collate = getattr(loader, "collate_fn", None)
    if dataset is None or collate is None or not hasattr(dataset, "__getitem__"):
        return None
    try:
        size = len(dataset)
    except TypeError:
        return None
    rows = [dataset[i] for i in range(min(n, size))]
    return collate(rows) if rows else None


def _monitor_of(config_or_monitor: Any, probe: Any) -> DynamicsMonitor:
    """A monitor from a ``DynamicsMonitor`` (used as is), a ``DynamicsConfig`` (or ``AnalysisConfig``),
    a dict of its keys, or None (the defaults)."""
    if isinstance(config_or_monitor, DynamicsMonitor):
        if probe is not None:
            config_or_monitor.probe = probe
        return config_or_monitor
    if config_or_monitor is None or isinstance(config_or_monitor, DynamicsConfig):
        return DynamicsMonitor.create(config_or_monitor, probe=probe)
    if isinstance(config_or_monitor, Mapping):
        return DynamicsMonitor.create(DynamicsConfig(**config_or_monitor), probe=probe)
    raise ConfigError(
        "config_or_monitor",
        f"must be a DynamicsConfig, a dict of its keys or a DynamicsMonitor, got {type(config_or_monitor).__name__}",
    )


def _grad_norm(params: list[torch.Tensor]) -> float:
    """The global L2 norm of the gradients of ``params`` (what norm clipping measures), in float64,
    with one device synchronisation."""
    norms = [torch.linalg.vector_norm(p.grad.detach(), dtype=torch.float64) for p in params if p.grad is not None]
    if not norms:
        return 0.0
    return float(torch.linalg.vector_norm(torch.stack([n.to(norms[0].device) for n in norms])))


def _clips_by_norm(trainer) -> bool:
    algorithm = str(getattr(trainer, "gradient_clip_algorithm", "norm") or "norm").lower()
    return bool(trainer.gradient_clip_val) and algorithm.endswith("norm")


def is_last_step(trainer, batch_idx: int) -> bool:
    """Whether the optimizer step just taken is the run's last: ``max_steps`` reached, the last batch
    of the last epoch (``max_epochs``), or a stop already requested (``trainer.should_stop``). A run
    stopped later in the step (early stopping after validation, ``max_time``) is caught at
    ``on_train_end``."""
    if trainer.should_stop:
        return True
    if _max_steps_reached(trainer, trainer.global_step):
        return True
    n = trainer.num_training_batches
    last_batch = isinstance(n, int) and batch_idx + 1 >= n
    return last_batch and _in_last_epoch(trainer)


def _max_steps_reached(trainer, step: int) -> bool:
    return trainer.max_steps is not None and trainer.max_steps >= 0 and step >= trainer.max_steps


def _in_last_epoch(trainer) -> bool:
    max_epochs = trainer.max_epochs
    return max_epochs is not None and max_epochs >= 0 and trainer.current_epoch + 1 >= max_epochs


class DynamicsCallback(Callback):
    """The dynamics monitor (:class:`modelxray.training_dynamics.DynamicsMonitor`) as a ``lightning.Callback``.

    ``DynamicsCallback(config_or_monitor)``: a ``DynamicsConfig`` (or ``AnalysisConfig``, or a dict of
    its keys) builds a monitor with the computers the config enables; a ``DynamicsMonitor`` (or
    ``ModelAnalysisManager``) is used as it is, with the computers it holds.

    When: it snapshots the trainable parameters at ``on_train_start`` and calls the monitor in
    ``on_train_batch_end`` of every batch that took an optimizer step (``trainer.global_step`` moved;
    with ``accumulate_grad_batches`` the others are skipped). There the weights are updated and the
    gradients still present: Lightning zeroes them just before the next ``training_step``, so this
    is the monitor's "after ``optimizer.step()``, before ``zero_grad()``". The step is
    ``trainer.global_step``; the run's last step (``max_steps``, the last batch of the last epoch, or
    a stop already requested) measures what is left of the interval, and a run stopped later in its
    step (early stopping after validation, ``max_time``) measures it at ``on_train_end`` (without
    ``grad/``: validation has zeroed the gradients by then).

    Gradient clipping: with ``gradient_clip_val`` and the ``norm`` algorithm, the ``grad/`` norms
    are of the raw gradients (on steps that may measure, the norm before clipping is taken in
    ``on_before_optimizer_step``; the clip coefficient is the ratio of the norms after and before);
    with ``value`` clipping they are of the clipped ones.

    The ``sparse/`` probe batch: ``probe=`` (or the monitor's own), else the first
    ``sparse.probe_batch`` rows of the validation dataset when Lightning has its loader at
    ``on_train_start`` (after the sanity check, which runs by default), else of the training
    dataset; rows go through the loader's collate function and the probe forward calls
    ``pl_module(inputs)``. The optimizer whose state ``optim/`` reads is the trainer's first.

    ``history`` keeps one row per measurement (``{"step": s, metric: value}``), as the Hugging Face
    callback does; ``prefix`` (e.g. ``"dynamics/"``) groups the names under one heading.
    """

    def __init__(self, config_or_monitor: Any = None, probe: Any = None, prefix: str = ""):
        self.monitor = _monitor_of(config_or_monitor, probe)
        self.prefix = prefix
        self.history: list[dict[str, float]] = []
        self._last_step: int | None = None
        self._last_batch: Any = None
        self._raw_grad_norm: float | None = None

    @property
    def config(self) -> DynamicsConfig:
        return self.monitor.config

    def on_train_start(self, trainer, pl_module) -> None:
        if self.monitor.probe is None and self.config.sparse.enabled:
            self.monitor.probe = self._probe_from_trainer(trainer)
        if self.monitor.snapshot is None:
            self.monitor.start(pl_module, step=trainer.global_step)
        self._last_step = trainer.global_step

    def _probe_from_trainer(self, trainer) -> Any:
        n = self.config.sparse.probe_batch
        for loaders in (trainer.val_dataloaders, trainer.train_dataloader):
            loader = _first_loader(loaders)
            if loader is not None:
                probe = _head_rows(loader, n)
                if probe is not None:
                    return probe
        return None  # the monitor takes the first training batch it sees

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        """The global gradient norm before Lightning clips it, when it clips by norm and the coming
        step may measure (due, or possibly the last)."""
        self._raw_grad_norm = None
        step = trainer.global_step + 1  # the step being taken
        may_measure = (
            self.monitor.due(step)
            or trainer.should_stop
            or _max_steps_reached(trainer, step)
            or _in_last_epoch(trainer)
        )
        if may_measure and _clips_by_norm(trainer):
            self._raw_grad_norm = _grad_norm(_optimizer_params(optimizer))

    def _grad_scale(self, trainer) -> float:
        """The clip coefficient of this step: clipped norm / raw norm (1 when nothing was clipped)."""
        raw = self._raw_grad_norm
        self._raw_grad_norm = None
        if not raw or not trainer.optimizers:
            return 1.0
        return _grad_norm(_optimizer_params(trainer.optimizers[0])) / raw

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step == self._last_step:  # accumulating gradients: no optimizer step on this batch
            return
        self._last_step = step
        self._last_batch = batch
        final = is_last_step(trainer, batch_idx)
        scale = self._grad_scale(trainer) if final or self.monitor.due(step) else 1.0
        self._raw_grad_norm = None
        self._measure(trainer, pl_module, batch, step, final, scale)

    def on_train_end(self, trainer, pl_module) -> None:
        """Measure what is left of the interval when training stopped before the planned last step."""
        snap = self.monitor.snapshot
        if snap is not None and trainer.global_step > snap.step:
            self._measure(trainer, pl_module, self._last_batch, trainer.global_step, True, 1.0)

    def _measure(self, trainer, pl_module, batch, step: int, final: bool, grad_scale: float) -> None:
        optimizer = trainer.optimizers[0] if trainer.optimizers else None
        metrics = self.monitor.on_optimizer_step(
            pl_module, inputs=batch, optimizer=optimizer, step=step, final=final, grad_scale=grad_scale
        )
        if not metrics:
            return
        metrics = {f"{self.prefix}{k}": v for k, v in metrics.items()}
        self.history.append({"step": float(step), **metrics})
        emit(trainer, _finite(metrics), step)


def _optimizer_params(optimizer) -> list[torch.Tensor]:
    return [p for g in optimizer.param_groups for p in g["params"]]
