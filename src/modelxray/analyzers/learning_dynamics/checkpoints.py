"""The checkpoints the learning_dynamics analyzer walks, in order: modelxray's own
(``model.checkpoints``) or your files (``checkpoints.pattern``), each knowing its number and how its
weights go into the model. Read by the analyzer's check before any work and by its run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from modelxray.core.errors import ConfigError

if TYPE_CHECKING:
    from torch import nn

OWN = (
    "the learning-dynamics analyzer needs a directory of at least two checkpoints (train with "
    "train.checkpoint_every=N, then model.checkpoints=<dir>; or your own files: checkpoints.pattern)"
)

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


def checkpoints_of(cfg, subject, check: bool = False) -> Checkpoints:
    """The configured checkpoints: your files (``checkpoints.pattern``; ``check``: each read and
    checked against the model first) or modelxray's own (``model.checkpoints``)."""
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
