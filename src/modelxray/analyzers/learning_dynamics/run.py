"""``analyzer=learning_dynamics``: the learning-dynamics analyses after training, on saved checkpoints.

    python run.py experiment=normal train=none analyzer=learning_dynamics model.checkpoints=DIR

Each checkpoint (``model.checkpoints``, in step order) is one "epoch" of the same callbacks that run
during training: the training set's logits give per-example correctness and confidence (forgetting,
cartography), one full-batch backward gives the gradient flow, the callbacks evaluate train/test
accuracy (memorization, transition steps, change points) and features (CKA, probe, Fourier
sparsity), and TracIn attributes what was learned between the first and the last checkpoint to
training examples (with ``lr``, the learning rate the checkpoints were trained at). Granularity is
that of the checkpoints: forgetting events between two checkpoints are only seen if both see them.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from modelxray.core.errors import ConfigError
from modelxray.core.progress import bar
from modelxray.core.result import Result, RunContext


def _default_sections() -> dict[str, Any]:
    return {
        "examples": {},
        "grad_flow": {},
        "memorization": {"transition_level": 0.95},
        "features": {"every_n_epochs": 1},
        "attribution": {"every_n_steps": 1, "max_train": 2000},
    }


def run(cfg, subject, ctx: RunContext) -> Result:
    from modelxray.models.checkpoints import load_weights, step_of
    from modelxray.training.callbacks import TrainState
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
