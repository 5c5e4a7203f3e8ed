"""The work of the learning_dynamics analyzer (its keys, checks and description: ``config.py``; the
checkpoints it walks: ``checkpoints.py``).

One replay serves every entry point: :func:`replay` walks a list of :class:`Checkpoint` (each knows
its step or epoch and how its weights go into the model) over a classification dataset. The CLI
builds that list from modelxray's own ``model.checkpoints`` or from your files
(``checkpoints.pattern``, :func:`checkpoints_of`); the Python API (``api.py``) from a directory or
a ``{epoch: model}`` mapping. So the numbers of the CLI and of Python are those of the same code.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from modelxray.analyzers.learning_dynamics.checkpoints import Checkpoints, checkpoints_of
from modelxray.core.formatting import listed
from modelxray.core.progress import bar
from modelxray.core.result import Result, RunContext

if TYPE_CHECKING:
    from torch import nn


def run(cfg, subject, ctx: RunContext) -> Result:
    return replay(cfg, subject.model, subject.data, checkpoints_of(cfg, subject), ctx.progress)


def replay(cfg, model: nn.Module, data, checkpoints: Checkpoints, progress: bool = False) -> Result:
    """Every checkpoint as one "epoch" of the learning callbacks (``cfg``: the analyzer's config)
    over ``data`` (a ``ClassificationData``), on a copy of ``model``."""
    from modelxray.core.callbacks import TrainState
    from modelxray.training.run import merge_reports
    from modelxray.training.tasks import ClassificationTask

    items = checkpoints.items
    task = ClassificationTask(data, None)
    callbacks = cfg._learning.callbacks()
    model = copy.deepcopy(model)
    items[0].load(model)  # what the callbacks see before the first "epoch"
    state = TrainState(model=model, task=task, lr=cfg.lr, max_steps=items[-1].step, step=items[0].step)
    for cb in callbacks:
        cb.on_train_begin(state)
    everything = torch.arange(len(data.y_train))
    files = []
    for c in bar(items, desc="checkpoints", enabled=progress):
        entry = c.load(model)
        files.append({checkpoints.unit: c.step, "file": c.name, "state_dict_entry": entry})
        state.step = c.step
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
    result.metrics["checkpoints"] = float(len(items))
    result.data["checkpoint_steps"] = [c.step for c in items]
    result.data["checkpoint_unit"] = checkpoints.unit
    result.data["checkpoint_files"] = files
    merge_reports(result, callbacks)
    result.insights[:0] = _provenance(checkpoints, files)
    return result


def _provenance(checkpoints: Checkpoints, files: list[dict]) -> list[str]:
    """The insight lines that say which checkpoints were analyzed, which entry held the weights and
    which files the pattern left out."""
    items, unit = checkpoints.items, checkpoints.unit
    out = [f"Analyzed {len(items)} checkpoints from {unit} {items[0].step} to {items[-1].step} ({checkpoints.where})."]
    wrapped = sorted({f["state_dict_entry"] for f in files if f["state_dict_entry"]})
    if wrapped:
        n = sum(1 for f in files if f["state_dict_entry"])
        out.append(f"State dicts read from the {', '.join(wrapped)} entry of {n} of {len(files)} files.")
    others = checkpoints.not_matching
    if others:
        shown = listed(others, 10)
        count = "1 file beside them was" if len(others) == 1 else f"{len(others)} files beside them were"
        out.append(f"{count} not used (not matching the pattern): {shown}.")
    return out


def _logits_and_grads(cfg, model, x, y) -> torch.Tensor:
    """Training-set logits (detached), with the full-batch loss gradient left in ``p.grad`` for the
    gradient-flow and attribution callbacks."""
    from modelxray.training_dynamics.outputs import logits_of

    model.eval()
    model.zero_grad(set_to_none=True)
    device = next(model.parameters()).device
    out = []
    n = len(y)
    for start in range(0, n, cfg.batch_size):
        xb, yb = x[start : start + cfg.batch_size].to(device), y[start : start + cfg.batch_size].to(device)
        logits = logits_of(model(xb))
        (F.cross_entropy(logits.float(), yb, reduction="sum") / n).backward()
        out.append(logits.detach())
    return torch.cat(out)
