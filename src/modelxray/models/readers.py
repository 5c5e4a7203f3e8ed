"""Reading a tensor file safely: safetensors, or a PyTorch checkpoint with ``weights_only=True``
unless the user opts in. Shared by the file source, the weights-only view and the digits classifier."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import torch

from modelxray.core.errors import ConfigError


def read_state_dict(path: Path, fmt: str, allow_unsafe_pickle: bool) -> dict[str, torch.Tensor]:
    if fmt == "safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except (SafetensorError, OSError, ValueError) as exc:
            raise ConfigError(str(path), f"not a readable safetensors file (truncated or corrupt?): {exc}") from None
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=not allow_unsafe_pickle)
    except pickle.UnpicklingError as exc:
        # torch names the global it refused ("unsupported GLOBAL posix.system"); random bytes fail otherwise
        if not allow_unsafe_pickle and "GLOBAL" in str(exc):
            raise ConfigError(
                str(path),
                "holds pickled objects besides tensors, which could run code when loaded; "
                "refused. If you trust the file, set model.allow_unsafe_pickle=true",
            ) from None
        raise ConfigError(
            str(path), f"not a readable PyTorch checkpoint (truncated or corrupt?): {_first_line(exc)}"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile) as exc:
        raise ConfigError(
            str(path), f"not a readable PyTorch checkpoint (truncated or corrupt?): {_first_line(exc)}"
        ) from None
    if isinstance(obj, dict) and not all(isinstance(v, torch.Tensor) for v in obj.values()):
        from modelxray.models.saved_checkpoints import WRAPPERS  # a training script's {"model_state_dict": ...}

        obj = next((obj[k] for k in WRAPPERS if isinstance(obj.get(k), (dict, torch.nn.Module))), obj)
    if isinstance(obj, torch.nn.Module):
        obj = obj.state_dict()
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise ConfigError(str(path), "does not hold a state dict (a mapping of names to tensors)")
    return obj


def _first_line(exc: BaseException) -> str:
    """The first line of an error's message, or its type where it has none (``EOFError()``)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
