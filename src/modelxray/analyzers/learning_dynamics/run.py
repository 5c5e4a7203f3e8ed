"""The work of the learning_dynamics analyzer (its keys, checks and description: ``config.py``)."""

from __future__ import annotations

import copy
from pathlib import Path

import torch
import torch.nn.functional as F

from modelxray.core.errors import ConfigError
from modelxray.core.progress import bar
from modelxray.core.result import Result, RunContext


def run(cfg, subject, ctx: RunContext) -> Result:
    from modelxray.core.callbacks import TrainState
    from modelxray.models.checkpoints import load_weights, step_of
    from modelxray.training.run import merge_reports
    from modelxray.training.tasks import ClassificationTask

    paths = list(getattr(subject.info, "checkpoints", None) or [])
    if len(paths) < 2:
        raise ConfigError(
            "model.checkpoints",
            "the learning-dynamics analyzer needs a directory of at least two "
            "checkpoints (train with train.checkpoint_every=N, then model.checkpoints=<dir>)",
        )
    data = subject.data
    task = ClassificationTask(data, None)
    callbacks = cfg._learning.callbacks()
    model = copy.deepcopy(subject.model)
    load_weights(model, Path(paths[0]))  # what the callbacks see before the first "epoch"
    state = TrainState(model=model, task=task, lr=cfg.lr, max_steps=step_of(paths[-1]), step=step_of(paths[0]))
    for cb in callbacks:
        cb.on_train_begin(state)
    everything = torch.arange(len(data.y_train))
    for path in bar(paths, desc="checkpoints", enabled=ctx.progress):
        load_weights(model, Path(path))
        state.step = step_of(path)
        state.logits = _logits_and_grads(cfg, model, data.x_train, data.y_train)
        state.indices = everything
        for cb in callbacks:
            cb.on_step_end(state)
        for cb in callbacks:
            cb.on_epoch_end(state)
        model.zero_grad(set_to_none=True)
        state.epoch += 1
    for cb in callbacks:
        cb.on_train_end(state)
    result = cfg.new_result()
    result.metrics["checkpoints"] = float(len(paths))
    result.data["checkpoint_steps"] = [step_of(p) for p in paths]
    merge_reports(result, callbacks)
    result.insights.insert(
        0,
        f"Analyzed {len(paths)} checkpoints from step {step_of(paths[0])} to "
        f"{step_of(paths[-1])} ({Path(paths[0]).parent.parent}).",
    )
    return result


def _logits_and_grads(cfg, model, x, y) -> torch.Tensor:
    """Training-set logits (detached), with the full-batch loss gradient left in ``p.grad`` for the
    gradient-flow and attribution callbacks."""
    model.eval()
    model.zero_grad(set_to_none=True)
    device = next(model.parameters()).device
    out = []
    n = len(y)
    for start in range(0, n, cfg.batch_size):
        xb, yb = x[start : start + cfg.batch_size].to(device), y[start : start + cfg.batch_size].to(device)
        logits = model(xb)
        (F.cross_entropy(logits.float(), yb, reduction="sum") / n).backward()
        out.append(logits.detach())
    return torch.cat(out)
