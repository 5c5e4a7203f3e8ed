"""``train=<preset>`` inside a run: train the subject, log step-indexed metrics, report.

The app calls ``train_subject`` between loading and quantizing; the analyzers then see the trained
model. Everything the loop logs goes through a buffer (``StepLogger``) that sends one tracker batch
per ``flush_rows`` rows, so a 4,000-step run does not make 4,000 round trips to the tracking store.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from modelxray.core.callbacks import Callback
from modelxray.core.result import Result
from modelxray.core.subject import Subject
from modelxray.kinds.table import AUTO, kind_of
from modelxray.training.config import TrainConfig
from modelxray.training.dynamics_callback import TrainingDynamicsCallback
from modelxray.training.loop import train
from modelxray.training.tasks import make_task


class StepLogger:
    """Buffers ``(metrics, step)`` rows and hands them to ``tracker_run.log_metric_rows`` in batches."""

    def __init__(self, tracker_run, flush_rows: int = 200, flush_seconds: float = 10.0):
        self.run, self.flush_rows, self.flush_seconds = tracker_run, flush_rows, flush_seconds
        self.rows: list[tuple[int, dict[str, float]]] = []
        self.last = time.monotonic()
        self.logged = 0

    def __call__(self, metrics: dict[str, float], step: int) -> None:
        self.rows.append((step, {k: float(v) for k, v in metrics.items()}))
        if len(self.rows) >= self.flush_rows or time.monotonic() - self.last > self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            self.run.log_metric_rows(self.rows)
            self.logged += sum(len(m) for _, m in self.rows)
            self.rows = []
        self.last = time.monotonic()


def thin(rows: list[dict], most: int) -> list[dict]:
    """At most ``most`` rows, evenly spaced, always the first and the last (report tables stay readable;
    the JSON keeps everything)."""
    if len(rows) <= most:
        return rows
    idx = sorted({round(i * (len(rows) - 1) / (most - 1)) for i in range(most)})
    return [rows[i] for i in idx]


def merge_reports(result: Result, callbacks: list[Callback]) -> None:
    """Each callback's report into ``result``: metrics, tables (long ones thinned), insights; the
    learning-dynamics callbacks' data under ``data["learning"][name]`` (their keys may coincide)."""
    learned: list[dict] = []
    for cb in callbacks:
        rep = cb.report()
        rep.tables = {
            k: thin(v, 25) if k not in ("sparse_quality", "hard_examples") else v for k, v in rep.tables.items()
        }
        result.metrics.update(rep.metrics)
        result.tables.update(rep.tables)
        if isinstance(cb, TrainingDynamicsCallback):
            result.data.update(rep.data)
        else:
            result.data.setdefault("learning", {})[cb.name] = rep.data
            learned += [{"metric": k, "value": v} for k, v in rep.metrics.items() if k.count("/") == 1]
        result.insights += rep.insights
    if learned:
        result.tables["learning_dynamics"] = learned


def callbacks_for(cfg: TrainConfig, task: Any) -> list[Callback]:
    """The callbacks a preset asks for: the dynamics monitor whenever any family is enabled."""
    dyn = cfg.dynamics
    out: list[Callback] = []
    if any(s.enabled for s in (dyn.param_change, dyn.sparse, dyn.grad, dyn.optim)):
        out.append(TrainingDynamicsCallback(dyn))
    learning = cfg.learning.callbacks()
    if learning and not task.follows_examples:
        from modelxray.core.errors import ConfigError

        raise ConfigError(
            "train.learning",
            "the learning-dynamics callbacks follow classification examples; use a "
            "classifier (e.g. model=mlp dataset=digits) or set train.learning.<section>=null",
        )
    return out + learning


def train_subject(
    subject: Subject,
    cfg: TrainConfig,
    tracker_run,
    output_dir: Path,
    extra_callbacks: list[Callback] = (),
    progress: bool = True,
) -> tuple[Subject, Result]:
    start = time.perf_counter()
    objective = kind_of(subject).trains_as if cfg.task == AUTO else cfg.task
    task = make_task(objective, subject.data, cfg)
    callbacks = callbacks_for(cfg, task) + list(extra_callbacks)
    logger = StepLogger(tracker_run)
    try:
        outcome = train(
            subject.model, task, cfg, callbacks=callbacks, log=logger, output_dir=output_dir, progress=progress
        )
    finally:
        logger.flush()
    result = Result("train", source=cfg)
    m = result.metrics
    m.update(
        {
            "steps": float(outcome.steps),
            "train_seconds": outcome.seconds,
            "seconds_per_step": outcome.seconds / max(outcome.steps, 1),
            "trainable_params": float(outcome.trainable_params),
            "total_params": float(outcome.total_params),
            task.rate_key: outcome.examples / max(outcome.seconds, 1e-9),
            "logged_values": float(logger.logged),
        }
    )
    if outcome.history:
        m["first_loss"] = outcome.history[0]["train/loss"]
        m["final_loss"] = outcome.history[-1]["train/loss"]
    if outcome.evals:
        for k, v in outcome.evals[0].items():
            if k != "step":
                m[f"before_{k}"] = v
        for k, v in outcome.evals[-1].items():
            if k != "step":
                m[f"after_{k}"] = v
    loop_overhead = sum(v for k, v in outcome.callback_seconds.items() if k not in ("evaluation", "checkpoints"))
    for k, v in outcome.callback_seconds.items():
        m[f"seconds_{k}"] = v
    m["callback_share"] = loop_overhead / outcome.seconds if outcome.seconds > 0 else 0.0
    result.data["loss_history"] = outcome.history  # every logged step, for the plots and the JSON
    result.tables["history"] = thin(outcome.history, 25)
    result.tables["evaluations"] = outcome.evals
    if outcome.checkpoints:
        result.tables["checkpoints"] = [{"path": p} for p in outcome.checkpoints]
    result.data.update(
        {
            "task": objective,
            "optimizer": cfg.optimizer,
            "lr": cfg.lr,
            "lora": cfg.lora.enabled,
            "interval": cfg.interval,
            "checkpoint_dir": str(Path(cfg.checkpoint_dir))
            if cfg.checkpoint_dir
            else str(Path(output_dir) / "checkpoints")
            if outcome.checkpoints
            else None,
        }
    )
    merge_reports(result, callbacks)
    result.insights.insert(0, _headline(outcome, objective, cfg))
    result.seconds = time.perf_counter() - start
    step = {"kind": "train", "steps": outcome.steps, "optimizer": cfg.optimizer, "lr": cfg.lr, "lora": cfg.lora.enabled}
    return subject.with_model(outcome.model, step), result


def _headline(outcome, kind: str, cfg: TrainConfig) -> str:
    what = (
        "LoRA adapters (merged after training)"
        if cfg.lora.enabled and cfg.lora.merge
        else "LoRA adapters"
        if cfg.lora.enabled
        else "all parameters"
    )
    text = (
        f"Trained {what} ({outcome.trainable_params:,} of {outcome.total_params:,}) for {outcome.steps} "
        f"{cfg.optimizer} steps at lr {cfg.lr:g} in {outcome.seconds:.1f} s"
    )
    if len(outcome.evals) >= 2:
        a, b = outcome.evals[0], outcome.evals[-1]
        key = "eval_perplexity" if "eval_perplexity" in a else "test_accuracy" if "test_accuracy" in a else None
        if key and all(math.isfinite(x[key]) for x in (a, b)):
            text += f"; held-out {key.replace('_', ' ')} {a[key]:.4g} -> {b[key]:.4g}"
    return text + "."
