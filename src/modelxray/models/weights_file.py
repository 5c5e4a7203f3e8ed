"""A weights-only file opened lazily: its tensors are read one at a time, never all at once.

``model=file`` with a safetensors file or a state dict and no ``architecture`` gives this instead of
a runnable model, so ``analyzer=inspect`` can still answer "what is inside this file?" for a model
larger than memory. safetensors files are memory-mapped (``safe_open``); state dicts are opened with
``torch.load(mmap=True, weights_only=True)``, so each tensor is paged in when it is read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

from modelxray.core.errors import ConfigError
from modelxray.models.readers import read_state_dict


class WeightsFile(nn.Module):
    """Stands in for a model where only the weights are known. It has no forward pass."""

    def __init__(self, path: Path, fmt: str):
        super().__init__()
        self.path, self.fmt = Path(path), fmt
        self._names: list[str] | None = None
        self._state = None  # the mmap'd state dict (state_dict format)

    def forward(self, *args, **kwargs):  # pragma: no cover - guarded by the task check
        raise RuntimeError(f"{self.path} holds weights only; set model.architecture to run it")

    def _open(self):
        if self.fmt == "safetensors":
            from safetensors import SafetensorError, safe_open

            try:
                return safe_open(str(self.path), framework="pt")
            except (SafetensorError, OSError, ValueError) as exc:
                raise ConfigError(
                    str(self.path), f"not a readable safetensors file (truncated or corrupt?): {exc}"
                ) from None
        if self._state is None:
            self._state = _mmap_state_dict(self.path)
        return None

    def tensor_names(self) -> list[str]:
        if self._names is None:
            handle = self._open()
            self._names = list(handle.keys()) if handle is not None else list(self._state)
        return self._names

    def iter_tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, tensor) in file order; each tensor is read (or paged in) only when it is yielded."""
        handle = self._open()
        if handle is not None:
            for name in handle.keys():
                yield name, handle.get_tensor(name)
        else:
            yield from self._state.items()

    def shapes(self) -> dict[str, tuple[int, ...]]:
        handle = self._open()
        if handle is not None:
            return {n: tuple(handle.get_slice(n).get_shape()) for n in handle.keys()}
        return {n: tuple(t.shape) for n, t in self._state.items()}


class WeightsFiles:
    """Several weights files read as one (a checkpoint's safetensors shards), one tensor at a time."""

    def __init__(self, files: list[WeightsFile]):
        self.files = files

    def iter_tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        for f in self.files:
            yield from f.iter_tensors()


def _mmap_state_dict(path: Path) -> dict[str, torch.Tensor]:
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - not mmap-able (old format) or bad: the strict reader explains which
        return read_state_dict(path, "state_dict", allow_unsafe_pickle=False)
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise ConfigError(str(path), "does not hold a state dict (a mapping of names to tensors)")
    return obj


def named_tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Every weight of ``model`` once (tied weights once), without copying: parameters of a
    runnable model (a quantized library's dequantized, ``quantized_weights``), or the file's
    tensors of a ``WeightsFile``."""
    if isinstance(model, WeightsFile):
        yield from model.iter_tensors()
        return
    from modelxray.models.quantized_weights import dequantized_tensors

    yield from dequantized_tensors(model)
