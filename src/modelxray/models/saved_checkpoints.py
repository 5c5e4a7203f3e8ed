"""A directory of your own ``torch.save``d state dicts, one per epoch or step, named by a pattern.

Why this module: a training script of your own saves checkpoints under its own names
(``model_epoch_3.pth``, ``ckpt-step=1200.pt``), often wrapped with the optimizer
(``{"model_state_dict": ..., "epoch": 3}``). The post-hoc learning-dynamics analysis walks them in
order, so this module

- finds them: ``pattern`` is a file name with ``{epoch}`` or ``{step}`` where the number is and
  ``*`` for any run of characters (``model_epoch_{epoch}.pth``, ``run*-step={step}.pt``); files
  that do not match are named in one log line, never used;
- reads them safely: ``torch.load(weights_only=True)`` (a file holding pickled Python objects,
  which could run code, is refused), ``.safetensors`` with safetensors;
- unwraps them: ``state_dict_key`` ``auto`` takes the file itself when it is a mapping of names to
  tensors, else the first of :data:`WRAPPERS` holding one; any other value names the entry;
- checks every file against the model before any analysis: the first missing, extra or
  differently shaped tensor is one ``ConfigError`` line naming the file. The check maps the files
  (``mmap``) instead of reading them, so it costs little even for large checkpoints.

Importing it loads no torch (the analyzer's config checks a pattern with it).
"""

from __future__ import annotations

import logging
import pickle
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelxray.core.errors import ConfigError

if TYPE_CHECKING:
    from torch import nn

log = logging.getLogger(__name__)

# entries that hold the model's state dict in common training scripts' checkpoints (in this order)
WRAPPERS = ("model_state_dict", "state_dict", "model", "model_state", "net", "network", "module", "weights")
_PLACEHOLDER = re.compile(r"\{(epoch|step)\}")
_SHOWN = 10  # file names listed in a message


@dataclass(frozen=True)
class SavedCheckpoint:
    """One file of the directory: its number (epoch or step, from the name) and where it is."""

    number: int
    path: Path


@dataclass(frozen=True)
class CheckpointPattern:
    """A file-name pattern: ``unit`` (``epoch`` or ``step``, the placeholder it holds) and the regex
    that matches whole names and captures the number."""

    text: str
    unit: str
    regex: re.Pattern

    def number(self, name: str) -> int | None:
        m = self.regex.fullmatch(name)
        return int(m.group("n")) if m else None


def parse_pattern(pattern: Any, key: str = "pattern") -> CheckpointPattern:
    """``pattern`` checked and compiled: one ``{epoch}`` or ``{step}``, ``*`` as a wildcard, the rest literal."""
    example = "e.g. model_epoch_{epoch}.pth or ckpt-step={step}.pt"
    if not isinstance(pattern, str) or not pattern:
        raise ConfigError(key, f"must be a file name with {{epoch}} or {{step}} where the number is, {example}")
    if "/" in pattern or "\\" in pattern:
        raise ConfigError(key, f"is a file name inside the checkpoint directory, without folders; got {pattern!r}")
    found = _PLACEHOLDER.findall(pattern)
    if len(found) != 1:
        what = "none" if not found else f"{len(found)}"
        raise ConfigError(
            key, f"must hold {{epoch}} or {{step}} exactly once where the number is ({what} in {pattern!r}), {example}"
        )
    before, after = _PLACEHOLDER.split(pattern)[0], _PLACEHOLDER.split(pattern)[-1]

    def literal(text: str) -> str:
        return ".*?".join(re.escape(part) for part in text.split("*"))  # lazy: "m*{epoch}" reads m12 as 12

    return CheckpointPattern(pattern, found[0], re.compile(f"{literal(before)}(?P<n>\\d+){literal(after)}"))


def _names(paths: list[Path]) -> str:
    shown = ", ".join(p.name for p in paths[:_SHOWN])
    return shown + (f" and {len(paths) - _SHOWN} more" if len(paths) > _SHOWN else "")


def list_saved(
    folder: str | Path, pattern: CheckpointPattern, dir_key: str = "dir", pattern_key: str = "pattern"
) -> tuple[list[SavedCheckpoint], list[Path]]:
    """The files of ``folder`` whose names match ``pattern``, by number, and the files that do not
    (:func:`log_not_matching` names them). Fewer than two matches, or two files with one number, is
    a ConfigError."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise ConfigError(dir_key, f"{str(root)!r} is not a directory (the folder holding your checkpoint files)")
    found: list[SavedCheckpoint] = []
    others: list[Path] = []
    for entry in sorted(p for p in root.iterdir() if p.is_file()):
        n = pattern.number(entry.name)
        if n is None:
            others.append(entry)
        else:
            found.append(SavedCheckpoint(n, entry))
    found.sort(key=lambda c: (c.number, c.path.name))
    for a, b in zip(found, found[1:]):
        if a.number == b.number:
            raise ConfigError(
                pattern_key, f"{a.path.name} and {b.path.name} in {root} are both {pattern.unit} {a.number}; keep one"
            )
    if len(found) < 2:
        there = f"; files there: {_names(others)}" if others else " (it holds no files)"
        raise ConfigError(
            pattern_key,
            f"{len(found)} file{'' if len(found) == 1 else 's'} in {root} match {pattern.text!r}; "
            f"the analysis needs at least two checkpoints{there}",
        )
    return found, others


def log_not_matching(folder: str | Path, pattern: CheckpointPattern, others: list[Path]) -> None:
    """One log line naming the files of the checkpoint folder that the pattern leaves out (never used)."""
    if others:
        count = "1 file" if len(others) == 1 else f"{len(others)} files"
        log.warning("%s in %s not matching %r, not used: %s", count, folder, pattern.text, _names(others))


def read_checkpoint(path: Path, key: str = "dir", mmap: bool = False) -> Any:
    """What ``path`` holds, read without running code: safetensors, or ``torch.load(weights_only=True)``
    (``mmap``: mapped rather than read, for the cheap check of names and shapes)."""
    import torch

    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except (SafetensorError, OSError, ValueError) as exc:
            raise ConfigError(
                key, f"{path} is not a readable safetensors file (truncated or corrupt?): {_first_line(exc)}"
            ) from None
    try:
        try:
            return torch.load(str(path), map_location="cpu", weights_only=True, mmap=mmap)
        except RuntimeError as exc:  # mmap needs the zip format torch.save writes since torch 1.6
            if not mmap or "zipfile" not in str(exc):
                raise
            return torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"GLOBAL ([\w.]+)", str(exc))
        if found:
            raise ConfigError(
                key,
                f"{path} holds pickled Python objects besides tensors ({found.group(1)}), which could run code "
                "when loaded: refused; save the weights with torch.save(model.state_dict(), path)",
            ) from None
        raise ConfigError(
            key, f"{path} is not a readable PyTorch checkpoint (truncated or corrupt?): {_first_line(exc)}"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile) as exc:
        raise ConfigError(
            key, f"{path} is not a readable PyTorch checkpoint (truncated or corrupt?): {_first_line(exc)}"
        ) from None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__


def _is_state_dict(obj: Any) -> bool:
    import torch

    return isinstance(obj, Mapping) and bool(obj) and all(isinstance(v, torch.Tensor) for v in obj.values())


def unwrap(obj: Any, state_dict_key: str, where: str, key: str = "state_dict_key") -> tuple[dict, str]:
    """The state dict in a loaded checkpoint and the entry it came from (``""``: the file itself)."""
    if state_dict_key != "auto":
        inner = obj.get(state_dict_key) if isinstance(obj, Mapping) else None
        if _is_state_dict(inner):
            return dict(inner), state_dict_key
        has = (
            f"holds no {state_dict_key!r} entry" if inner is None else f"its {state_dict_key!r} entry is no state dict"
        )
        raise ConfigError(key, f"{where} {has}; {_contents(obj)}")
    if _is_state_dict(obj):
        return dict(obj), ""
    if isinstance(obj, Mapping):
        for name in WRAPPERS:
            if _is_state_dict(obj.get(name)):
                return dict(obj[name]), name
    raise ConfigError(
        key,
        f"{where} holds no state dict (a mapping of names to tensors), neither itself nor under "
        f"{'/'.join(WRAPPERS)}; {_contents(obj)}: set {key} to the entry that holds it",
    )


def _contents(obj: Any) -> str:
    if isinstance(obj, Mapping):
        shown = ", ".join(f"{k} ({type(v).__name__})" for k, v in list(obj.items())[:8])
        return f"it holds {shown}" if shown else "it is an empty mapping"
    return f"it holds a {type(obj).__name__}"


def check_fits(state: Mapping[str, Any], expected: Mapping[str, tuple], what: str, model_name: str, key: str) -> None:
    """One line on the first tensor by which ``state`` does not fit the model: missing, of another
    shape (in the model's order), or extra; nothing when it fits."""
    missing = [k for k in expected if k not in state]
    shaped = [k for k in expected if k in state and tuple(state[k].shape) != tuple(expected[k])]
    extra = [k for k in state if k not in expected]
    fix = "use the model class and arguments the checkpoints were saved from"
    first = next((k for k in expected if k in missing or k in shaped), None)
    if first in shaped:
        raise ConfigError(
            key,
            f"{what} does not fit {model_name}: {first} is {list(state[first].shape)} in the file and "
            f"{list(expected[first])} in the model ({len(shaped)} of {len(expected)} tensors differ in shape); {fix}",
        )
    if first is not None:
        raise ConfigError(
            key,
            f"{what} does not fit {model_name}: it has no {first} ({len(missing)} of the model's {len(expected)} "
            f"tensors missing; the file's first is {next(iter(state), None)}); {fix}",
        )
    if extra:
        raise ConfigError(
            key,
            f"{what} does not fit {model_name}: {extra[0]} is in the file but not in the model "
            f"({len(extra)} extra tensors); {fix}",
        )


def shapes_of(model: nn.Module) -> dict[str, tuple]:
    """The names and shapes a state dict of ``model`` must have."""
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def model_name(model: nn.Module) -> str:
    cls = type(model)
    return f"{cls.__module__}.{cls.__qualname__}"


def check_all(
    saved: list[SavedCheckpoint], model: nn.Module, state_dict_key: str, dir_key: str, sd_key: str
) -> list[str]:
    """Every file read (mapped) and checked against ``model`` before any work; returns the entry
    each state dict came from (``""``: the file itself)."""
    expected, name = shapes_of(model), model_name(model)
    entries = []
    for c in saved:
        obj = read_checkpoint(c.path, dir_key, mmap=True)
        state, entry = unwrap(obj, state_dict_key, str(c.path), sd_key)
        check_fits(state, expected, str(c.path), name, dir_key)
        entries.append(entry)
        del obj, state
    return entries


def load_saved(model: nn.Module, path: Path, state_dict_key: str, dir_key: str, sd_key: str) -> str:
    """Load one checkpoint into ``model`` in place; returns the entry its state dict came from
    (``""``: the file itself). Checked again: the file may have changed since :func:`check_all`."""
    state, entry = unwrap(read_checkpoint(path, dir_key), state_dict_key, str(path), sd_key)
    check_fits(state, shapes_of(model), str(path), model_name(model), dir_key)
    model.load_state_dict(state, strict=True)
    return entry
