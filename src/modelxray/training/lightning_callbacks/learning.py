"""LearningDynamicsCallback: the learning-dynamics trackers at Lightning's batch and epoch hooks,
evaluating on loaders over the same datasets in order so that the training order is unchanged."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch
from lightning.pytorch import Callback

from modelxray.core.errors import ConfigError
from modelxray.training.lightning_callbacks._shared import _finite, _first_loader, emit

log = logging.getLogger("modelxray.training")

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
    """The learning-dynamics trackers (:mod:`modelxray.learning_dynamics.trackers`) as a ``lightning.Callback``:
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
        from modelxray.learning_dynamics.callbacks.configs import MemorizationConfig
        from modelxray.learning_dynamics.trackers import (
            GradientFlowAnalyzer,
            LearningDynamicsAnalyzer,
            MemorizationDetector,
        )

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
        from modelxray.learning_dynamics.trackers import GradientFlowAnalyzer

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
        from modelxray.learning_dynamics.loaders import batch_pair

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
            from modelxray.learning_dynamics.loaders import is_sequential

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
        from modelxray.learning_dynamics.callbacks.configs import MemorizationConfig

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
