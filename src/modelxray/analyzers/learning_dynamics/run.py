"""The work of the learning_dynamics analyzer (its keys, checks and description: ``config.py``).

One replay serves every entry point: :func:`replay` walks a list of :class:`Checkpoint` (each knows
its step or epoch and how its weights go into the model) over a classification dataset. The CLI
builds that list from modelxray's own ``model.checkpoints`` or from your files
(``checkpoints.pattern``, :func:`checkpoints_of`); the Python API (``api.py``) from a directory or
a ``{epoch: model}`` mapping. So the numbers of the CLI and of Python are those of the same code.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from modelxray.core.errors import ConfigError
from modelxray.core.progress import bar
from modelxray.core.result import Result, RunContext

if TYPE_CHECKING:
    from torch import nn

# the config keys of your checkpoints, as the CLI names them (the Python API names its arguments)
CLI_KEYS = {"dir": "checkpoints.dir", "pattern": "checkpoints.pattern", "state_dict_key": "checkpoints.state_dict_key"}


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint to replay: its number (step or epoch), a name for messages, and ``load``, which
    puts its weights into a model and returns the entry its state dict came from (``""``: the file)."""

    step: int
    name: str
    load: Callable[[nn.Module], str]


@dataclass
class Checkpoints:
    """The checkpoints of one analysis, in order; ``unit`` is what their numbers count (``step``,
    ``epoch``), ``where`` says where they come from, ``not_matching`` the files the pattern left out."""

    items: list[Checkpoint]
    unit: str
    where: str
    not_matching: list[str] = field(default_factory=list)


def run(cfg, subject, ctx: RunContext) -> Result:
    return replay(cfg, subject.model, subject.data, checkpoints_of(cfg, subject), ctx.progress)


def checkpoints_of(cfg, subject, check: bool = False) -> Checkpoints:
    """The configured checkpoints: your files (``checkpoints.pattern``; ``check``: each read and
    checked against the model first) or modelxray's own (``model.checkpoints``)."""
    from modelxray.analyzers.learning_dynamics.config import OWN

    c = cfg.checkpoints
    own = list(getattr(subject.info, "checkpoints", None) or [])
    if c.pattern is None:
        if len(own) < 2:
            raise ConfigError("model.checkpoints", OWN)
        return own_checkpoints(own)
    if own:
        raise ConfigError(
            "checkpoints.pattern",
            "reads your checkpoint files, and model.checkpoints lists modelxray's own step_N checkpoints: set one of them",
        )
    folder = c.dir
    if folder is None and getattr(subject.info, "file_path", None):
        folder = str(Path(subject.info.file_path).parent)
    if folder is None:
        raise ConfigError(
            "checkpoints.dir", "is needed: the folder of your checkpoint files (the model was not loaded from a file)"
        )
    return saved_checkpoints(folder, c.pattern, c.state_dict_key, subject.model, check, CLI_KEYS)


def own_checkpoints(paths: list[str]) -> Checkpoints:
    """modelxray's ``step_<N>/model.safetensors`` checkpoints (listed by the model source)."""
    from modelxray.models.checkpoints import load_weights, step_of

    def load(path: Path, model: nn.Module) -> str:
        load_weights(model, path)
        return ""

    items = [Checkpoint(step_of(p), str(p), partial(load, Path(p))) for p in paths]
    return Checkpoints(items, "step", str(Path(paths[0]).parent.parent))


def saved_checkpoints(
    folder: str | Path, pattern: str, state_dict_key: str, model: nn.Module, check: bool, keys: dict[str, str]
) -> Checkpoints:
    """Your files in ``folder`` matching ``pattern``, by number; ``check``: every one read (mapped)
    and checked against ``model`` now, so a misfit fails before any analysis."""
    from modelxray.models import saved_checkpoints as sc

    parsed = sc.parse_pattern(pattern, keys["pattern"])
    saved, others = sc.list_saved(folder, parsed, keys["dir"], keys["pattern"])
    if check:  # once per analysis: the preflight of the CLI, the Python API's only listing
        sc.log_not_matching(folder, parsed, others)
        sc.check_all(saved, model, state_dict_key, keys["dir"], keys["state_dict_key"])

    def load(path: Path, target: nn.Module) -> str:
        return sc.load_saved(target, path, state_dict_key, keys["dir"], keys["state_dict_key"])

    items = [Checkpoint(c.number, str(c.path), partial(load, c.path)) for c in saved]
    return Checkpoints(items, parsed.unit, f"{Path(folder).expanduser()}, {pattern}", [p.name for p in others])


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
        shown = ", ".join(others[:10]) + (f" and {len(others) - 10} more" if len(others) > 10 else "")
        count = "1 file beside them was" if len(others) == 1 else f"{len(others)} files beside them were"
        out.append(f"{count} not used (not matching the pattern): {shown}.")
    return out


def _logits_and_grads(cfg, model, x, y) -> torch.Tensor:
    """Training-set logits (detached), with the full-batch loss gradient left in ``p.grad`` for the
    gradient-flow and attribution callbacks."""
    from modelxray.dynamics.outputs import logits_of

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
