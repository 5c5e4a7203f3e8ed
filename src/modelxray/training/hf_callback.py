"""``DynamicsTrainerCallback``: the dynamics monitor inside ``transformers.Trainer`` (and TRL's
trainers, which are Trainers).

It runs in ``on_optimizer_step``: after ``optimizer.step()`` and before ``zero_grad()``, so the
``grad/`` metrics see this step's gradients. Metrics reach

* the Trainer's own reporters (``report_to``: MLflow, TensorBoard, W&B ...) through
  ``trainer.log`` when the callback knows the trainer (``DynamicsTrainerCallback(monitor, trainer)``
  or ``callback.attach(trainer)``), and
* the active MLflow run directly, at the Trainer's global step, when MLflow is not among the
  Trainer's reporters (so nothing is logged twice).

The sparse-quality probe is the monitor's ``probe`` if given, else the first ``sparse.probe_batch``
rows of the Trainer's eval dataset (or train dataset) through its data collator.

    monitor = DynamicsMonitor.create(DynamicsConfig(interval=100))
    trainer = Trainer(model=model, args=args, train_dataset=ds)
    trainer.add_callback(DynamicsTrainerCallback(monitor, trainer))
    trainer.train()
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from modelxray.training_dynamics.monitor import DynamicsMonitor


def _reports_to_mlflow(args) -> bool:
    report_to = getattr(args, "report_to", None) or []
    if isinstance(report_to, str):
        report_to = [report_to]
    return "mlflow" in report_to or "all" in report_to


class DynamicsTrainerCallback(TrainerCallback):
    def __init__(self, monitor: DynamicsMonitor, trainer: Any = None, prefix: str = ""):
        self.monitor = monitor
        self.trainer = trainer
        self.prefix = prefix  # e.g. "dynamics/" to group the metrics under one heading
        self.history: list[dict[str, float]] = []
        self._pending: dict[str, float] | None = None

    def attach(self, trainer) -> DynamicsTrainerCallback:
        self.trainer = trainer
        return self

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.monitor.probe is None and self.monitor.config.sparse.enabled:
            self.monitor.probe = self._probe_from_trainer()
        if model is not None and self.monitor.snapshot is None:
            self.monitor.start(model, step=state.global_step)

    def _probe_from_trainer(self):
        """The first ``sparse.probe_batch`` rows of the eval (else train) dataset, through the Trainer's
        collator: fixed, and drawn without touching the training sampler's random state."""
        if self.trainer is None:
            return None
        dataset = self.trainer.eval_dataset if self.trainer.eval_dataset is not None else self.trainer.train_dataset
        if dataset is None or isinstance(dataset, dict) or not hasattr(dataset, "__getitem__"):
            return None
        n = min(self.monitor.config.sparse.probe_batch, len(dataset))
        batch = self.trainer.data_collator([dataset[i] for i in range(n)])
        return {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask")}

    def on_optimizer_step(self, args, state, control, model=None, optimizer=None, **kwargs):
        step = state.global_step + 1  # the Trainer counts this step after the callbacks of on_optimizer_step
        final = bool(state.max_steps) and step >= state.max_steps
        metrics = self.monitor.on_optimizer_step(
            model, inputs=kwargs.get("inputs"), optimizer=optimizer, step=step, final=final
        )
        if not metrics:
            return
        metrics = {f"{self.prefix}{k}": v for k, v in metrics.items()}
        self.history.append({"step": float(step), **metrics})
        self._log_mlflow(args, metrics, step)
        if self.trainer is not None:
            self._pending = metrics  # trainer.log uses state.global_step, which is updated after this hook

    def on_step_end(self, args, state, control, **kwargs):
        pending = self._pending
        if pending and self.trainer is not None:
            self._pending = None
            self.trainer.log(dict(pending))

    def _log_mlflow(self, args, metrics: dict[str, float], step: int) -> None:
        if _reports_to_mlflow(args) and self.trainer is not None:
            return  # the Trainer's MLflowCallback logs them via trainer.log
        from modelxray.tracking.mlflow_tracker import log_to_active_run

        log_to_active_run(metrics, step)
