"""PyTorch Lightning callbacks: the weight-dynamics monitor and the learning-dynamics trackers inside
``lightning.Trainer``, beside the ``transformers.Trainer`` callback (:mod:`.hf_callback`).

    from modelxray.dynamics import DynamicsConfig
    from modelxray.training.lightning_callbacks import DynamicsCallback, LearningDynamicsCallback

    trainer = lightning.Trainer(
        max_epochs=20,
        callbacks=[DynamicsCallback(DynamicsConfig(interval=50)), LearningDynamicsCallback(num_classes=10)],
    )
    trainer.fit(module, train_loader, val_loader)

Both send their metrics to every logger of the trainer (``trainer.loggers``: CSV, TensorBoard,
MLflow, W&B ...) at ``trainer.global_step``, the number of optimizer steps done, as the Hugging Face
callback and modelxray's own loop do. They call the loggers directly rather than
``pl_module.log_dict``: Lightning writes step metrics only every ``log_every_n_steps`` steps and
as float32, which would drop or round the measurements. When an MLflow run is active
(``mlflow.start_run()`` around ``fit``) and no ``MLFlowLogger`` is among the trainer's loggers, the
same names go to that run too (so nothing is logged twice).

Lightning is an optional dependency (``pip install "modelxray[lightning]"``); this module is the
only one of modelxray that imports it.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Mapping
from typing import Any

import torch

try:
    from lightning.pytorch import Callback
except ImportError:  # pragma: no cover - exercised only where lightning is absent
    raise ImportError(
        'modelxray.training.lightning_callbacks needs PyTorch Lightning: pip install "modelxray[lightning]"'
    ) from None

from modelxray.core.errors import ConfigError
from modelxray.dynamics.config import DynamicsConfig
from modelxray.dynamics.monitor import DynamicsMonitor

log = logging.getLogger("modelxray.training")

__all__ = ["DynamicsCallback", "LearningDynamicsCallback"]


# ---- shared helpers ---------------------------------------------------------------------------------
def _finite(metrics: dict[str, Any]) -> dict[str, float]:
    """Numbers only, and only finite ones: loggers reject NaN (MLflow) or chart it as a gap."""
    out = {}
    for k, v in metrics.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)):
            out[k] = float(v)
    return out


def _has_mlflow_logger(trainer) -> bool:
    return any(type(lg).__name__ == "MLFlowLogger" for lg in trainer.loggers)


def emit(trainer, metrics: dict[str, float], step: int) -> None:
    """Send ``metrics`` to every logger of the trainer at ``step``, and to the active MLflow run when
    no ``MLFlowLogger`` of the trainer already receives them. Without ``mlflow`` imported there can be
    no active run, so a user who never imported it does not pay for the import."""
    if not metrics:
        return
    for lg in trainer.loggers:
        lg.log_metrics(dict(metrics), step=step)
    if "mlflow" in sys.modules and not _has_mlflow_logger(trainer):
        from modelxray.tracking.mlflow_tracker import log_to_active_run

        log_to_active_run(metrics, step)


def _first_loader(loaders: Any) -> Any:
    """The first of Lightning's dataloader collections (a loader, a list or a dict of them)."""
    if isinstance(loaders, Mapping):
        return next(iter(loaders.values()), None)
    if isinstance(loaders, (list, tuple)):
        return loaders[0] if loaders else None
    return loaders


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


# ---- weight dynamics ----------------------------------------------------------------------------------
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
    """The dynamics monitor (:class:`modelxray.dynamics.DynamicsMonitor`) as a ``lightning.Callback``.

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


# ---- learning dynamics ----------------------------------------------------------------------------------
_MEMORIZATION_KEYS = ("train_accuracy", "test_accuracy", "train_loss", "test_loss", "gap_accuracy", "gap_loss")


def _eval_loader(loader: Any, batch_size: int) -> Any:
    """A loader over the same dataset in order, for a no-grad evaluation pass. Why not the trainer's
    own: iterating a DataLoader draws from its ``generator`` (its shuffle and worker seeds), so an
    extra pass over the training loader would change the order of every later epoch."""
    if not isinstance(loader, torch.utils.data.DataLoader):
        return loader  # any iterable of batches: used as it is
    if isinstance(loader.dataset, torch.utils.data.IterableDataset):
        return loader
    return torch.utils.data.DataLoader(
        loader.dataset,
        batch_size=loader.batch_size or batch_size,
        shuffle=False,
        collate_fn=loader.collate_fn,
        num_workers=loader.num_workers,
        worker_init_fn=loader.worker_init_fn,
    )


def _tracker(value: Any, cls: type, key: str, **kwargs: Any) -> Any:
    """A tracker from ``True`` (defaults), a dict of its keyword options, an instance (used as is), or
    None for False."""
    if value is False or value is None:
        return None
    if isinstance(value, cls):
        return value
    if value is True:
        return cls(**kwargs)
    if isinstance(value, Mapping):
        return cls(**{**kwargs, **value})
    raise ConfigError(key, f"must be True, False, a dict of {cls.__name__} options or a {cls.__name__}, got {value!r}")


class LearningDynamicsCallback(Callback):
    """The learning-dynamics trackers (:mod:`modelxray.learning.trackers`) as a ``lightning.Callback``:
    forgetting and dataset cartography per training example, train/validation memorization, and
    optionally per-layer gradient flow. The numbers are the trackers' (and so the training-loop
    callbacks'): the same calls, made at Lightning's hooks.

    ``LearningDynamicsCallback(num_classes=None, examples=True, memorization=True,
    gradient_flow=False, logits_key="logits", indices_key="indices")``; each of ``examples``,
    ``memorization`` and ``gradient_flow`` is True (defaults), False, a dict of the tracker's
    options (``examples={"track_examples": 500}``, ``memorization={"gap_open": 0.2,
    "every_n_epochs": 5}``, ``gradient_flow={"track_layers": ["net.0"]}``) or a tracker instance.
    After ``fit`` the trackers are ``callback.examples`` (a ``LearningDynamicsAnalyzer``),
    ``callback.memorization`` (a ``MemorizationDetector``) and ``callback.gradient_flow`` (a
    ``GradientFlowAnalyzer``), with their ``analyze_*``, ``plot_*`` and ``save`` methods.

    Batches are ``(inputs, targets, ...)`` with class-index targets. What ``training_step`` should
    return: ``{"loss": loss, "logits": logits}`` (``logits_key``: the (batch, classes) logits of
    the forward it already ran), and, when the training loader shuffles, the batch's dataset
    positions as ``"indices"`` (``indices_key``; e.g. from a dataset yielding ``(x, y, index)``).

    - per batch (``on_train_batch_end``): ``track_batch`` with those logits, no second forward.
      When the step returns no logits (a bare loss), one no-grad forward of the batch in eval mode,
      after the optimizer step, as the tracker does without ``outputs``. Without indices the
      positions are the running count of a loader that does not shuffle; with a shuffling loader
      that is an error naming ``indices_key``.
    - per epoch (``on_train_epoch_end``, after Lightning's validation): ``compute_epoch_statistics``
      logs ``examples/*`` and ``cartography/*``; every ``every_n_epochs``-th epoch (the
      ``memorization`` option, default that of ``MemorizationConfig``) ``compute_memorization_scores``
      over the trainer's training dataset and its first validation loader logs
      ``memorization/train_accuracy``, ``test_accuracy``, ``train_loss``, ``test_loss``,
      ``gap_accuracy`` and ``gap_loss``. The passes run in eval mode without gradients on loaders
      over the same datasets in order, so the training order and the random state are unchanged.
      Without a validation loader memorization is skipped, with one warning.
    - gradient flow (``on_before_optimizer_step``: after the backward, before clipping and the
      step): ``track_batch_gradients`` logs ``grad_flow/*``.

    Metrics go to the trainer's loggers (and the active MLflow run) as described in the module
    docstring: per-epoch ones at the ``trainer.global_step`` of the epoch's end.
    """

    def __init__(
        self,
        num_classes: int | None = None,
        examples: Any = True,
        memorization: Any = True,
        gradient_flow: Any = False,
        logits_key: str = "logits",
        indices_key: str = "indices",
    ):
        from modelxray.learning.callbacks.configs import MemorizationConfig
        from modelxray.learning.trackers import GradientFlowAnalyzer, LearningDynamicsAnalyzer, MemorizationDetector

        self.num_classes = num_classes
        self.logits_key = logits_key
        self.indices_key = indices_key
        self.examples = _tracker(examples, LearningDynamicsAnalyzer, "examples", num_classes=num_classes)
        mem = dict(memorization) if isinstance(memorization, Mapping) else memorization
        self.memorization_every = MemorizationConfig.every_n_epochs
        if isinstance(mem, dict) and "every_n_epochs" in mem:
            every = mem.pop("every_n_epochs")
            if isinstance(every, bool) or not isinstance(every, int) or every < 1:
                raise ConfigError("memorization.every_n_epochs", f"must be a positive integer, got {every!r}")
            self.memorization_every = every
        self.memorization = _tracker(mem, MemorizationDetector, "memorization", num_classes=num_classes)
        if not (isinstance(gradient_flow, (bool, Mapping, GradientFlowAnalyzer)) or gradient_flow is None):
            raise ConfigError(
                "gradient_flow",
                f"must be True, False, a dict of GradientFlowAnalyzer options or a GradientFlowAnalyzer, "
                f"got {gradient_flow!r}",
            )
        self._gradient_flow_option = gradient_flow
        self.gradient_flow = None
        self._offset = 0  # dataset position of the next batch, for a loader that does not shuffle
        self._batch_idx = 0
        self._sequential: bool | None = None
        self._warned: set[str] = set()

    # ---- set-up ------------------------------------------------------------------------------------
    def on_fit_start(self, trainer, pl_module) -> None:
        """Build the gradient-flow tracker on the module being trained (it needs the model)."""
        from modelxray.learning.trackers import GradientFlowAnalyzer

        opt = self._gradient_flow_option
        if isinstance(opt, Mapping):
            opt = dict(opt)
            layers = opt.pop("track_layers", None)
            self.gradient_flow = GradientFlowAnalyzer(pl_module, layers, **opt)
        elif opt is True:
            self.gradient_flow = GradientFlowAnalyzer(pl_module)
        else:
            self.gradient_flow = _tracker(opt, GradientFlowAnalyzer, "gradient_flow")

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._offset = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._batch_idx = batch_idx  # for the gradient-flow measurement of this batch's step

    # ---- per batch ----------------------------------------------------------------------------------
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.examples is None:
            return
        from modelxray.learning.loaders import batch_pair

        inputs, targets = batch_pair(batch, "batch")
        out = outputs if isinstance(outputs, Mapping) else {}
        positions = self._positions(trainer, out.get(self.indices_key), len(targets))
        logits = out.get(self.logits_key)
        self.examples.track_batch(pl_module, inputs, targets, positions, trainer.current_epoch, outputs=logits)

    def _positions(self, trainer, indices: Any, n: int) -> Any:
        start = self._offset
        self._offset += n
        if indices is not None:
            return indices.detach() if torch.is_tensor(indices) else indices
        if self._sequential is None:
            from modelxray.learning.loaders import is_sequential

            self._sequential = is_sequential(_first_loader(trainer.train_dataloader))
        if not self._sequential:
            raise ConfigError(
                self.indices_key,
                "the training loader shuffles, so the batch's dataset positions are unknown: return them "
                f"from training_step as outputs[{self.indices_key!r}] (e.g. from a dataset yielding (x, y, index))",
            )
        return torch.arange(start, start + n)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if self.gradient_flow is None:
            return
        metrics = self.gradient_flow.track_batch_gradients(None, trainer.current_epoch, self._batch_idx)
        emit(trainer, _finite(metrics), trainer.global_step + 1)  # the step being taken

    # ---- per epoch ----------------------------------------------------------------------------------
    def on_train_epoch_end(self, trainer, pl_module) -> None:
        from modelxray.learning.callbacks.configs import MemorizationConfig

        epoch = trainer.current_epoch
        metrics: dict[str, float] = {}
        train_eval = _eval_loader(_first_loader(trainer.train_dataloader), MemorizationConfig.batch_size)
        if self.examples is not None:
            stats = self.examples.compute_epoch_statistics(train_eval, pl_module, epoch)
            metrics.update({k: v for k, v in stats.items() if k.startswith(("examples/", "cartography/"))})
        if self.gradient_flow is not None:
            self.gradient_flow.compute_epoch_statistics(epoch)
        if self.memorization is not None and (epoch + 1) % self.memorization_every == 0:
            val = _first_loader(trainer.val_dataloaders)
            if val is None:
                self._warn_once(
                    "memorization",
                    f"memorization skipped at epoch {epoch}: the trainer has no validation dataloader "
                    "(pass val_dataloaders to fit, or define val_dataloader)",
                )
            else:
                val_eval = _eval_loader(val, MemorizationConfig.batch_size)
                scores = self.memorization.compute_memorization_scores(pl_module, train_eval, val_eval, epoch)
                metrics.update({f"memorization/{k}": scores[k] for k in _MEMORIZATION_KEYS})
        emit(trainer, _finite(metrics), trainer.global_step)

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("modelxray: %s", message)
