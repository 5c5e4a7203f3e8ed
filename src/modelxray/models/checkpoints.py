"""A directory of training checkpoints, as ``train.checkpoint_every`` writes it: ``step_<N>/`` folders
holding ``model.safetensors`` (or ``step_<N>.safetensors`` files). Weights only (safetensors runs no
code); the post-hoc learning-dynamics analyzer walks them in step order."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from modelxray.core.errors import ConfigError

if TYPE_CHECKING:
    from torch import nn

_STEP = re.compile(r"^step_(\d+)(?:\.safetensors)?$")


def step_of(path: str | Path) -> int:
    """The training step of a checkpoint file (``.../step_<N>/model.safetensors`` or ``step_<N>.safetensors``)."""
    p = Path(path)
    m = _STEP.match(p.parent.name if p.name == "model.safetensors" else p.name)
    if not m:
        raise ValueError(f"{path}: not a step_<N> checkpoint")
    return int(m.group(1))


def list_checkpoints(folder: str | Path, key: str = "model.checkpoints") -> list[tuple[int, Path]]:
    """(step, weights file) for every checkpoint in ``folder``, by step."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise ConfigError(key, f"{str(root)!r} is not a directory of checkpoints (step_<N>/model.safetensors)")
    found = []
    for entry in root.iterdir():
        m = _STEP.match(entry.name)
        if not m:
            continue
        path = entry / "model.safetensors" if entry.is_dir() else entry
        if path.is_file() and path.suffix == ".safetensors":
            found.append((int(m.group(1)), path))
    if not found:
        raise ConfigError(
            key,
            f"{str(root)!r} holds no step_<N>/model.safetensors checkpoints; train with "
            "train.checkpoint_every=N to write them",
        )
    return sorted(found)


def load_weights(model: nn.Module, path: Path, key: str = "model.checkpoints") -> nn.Module:
    """Load a safetensors checkpoint into ``model`` in place, with a clear error when it does not fit."""
    from safetensors import SafetensorError
    from safetensors.torch import load_model

    try:
        missing, unexpected = load_model(model, str(path), strict=False, device=str(next(model.parameters()).device))
    except (SafetensorError, OSError, RuntimeError) as exc:
        raise ConfigError(
            key,
            f"{path}: does not fit the configured model ({str(exc).splitlines()[0]}); "
            "use the model config the checkpoints were trained with",
        ) from None
    if missing or unexpected:
        raise ConfigError(
            key,
            f"{path}: does not fit the configured model (missing {list(missing)[:3]}, "
            f"unexpected {list(unexpected)[:3]}); use the model config the checkpoints were trained with",
        )
    return model
