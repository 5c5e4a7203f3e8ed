"""The original tensors of a model that an analysis changes in place (quantized for one configuration
after another, perturbed with noise), put back bit-exact afterwards, without a second copy of the
model in memory when the user does not want one.

Where the originals wait is ``runtime.original_weights``:

- ``disk``: written once to an unnamed temporary file in the run directory (removed by the system
  even if the process dies) and read back straight into the model's own tensors, so the process
  holds one copy of the weights; the file's pages live in the page cache, not in the process.
- ``memory``: a copy beside the model (fastest restore, twice the memory of the changed tensors).
- ``cpu``: a copy in host memory, for a model on a GPU (GPU memory stays at one copy).
- ``auto``: ``cpu`` for a model on a GPU, else ``disk``.

Our own code because ``torch.load``/safetensors read a tensor into new memory (or a memory map that
counts in the process's resident memory); here each tensor is read with ``readinto`` into the
parameter's own storage. A quantizer that swapped a parameter for another dtype or a tensor
subclass gets a plain parameter back.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

PLACES = ("auto", "disk", "memory", "cpu")
_CHUNK = 1 << 30  # bytes per read/write call (Linux caps one call at about 2 GiB)


@dataclass
class _Entry:
    module: nn.Module
    attr: str
    is_param: bool
    requires_grad: bool
    dtype: torch.dtype
    shape: torch.Size
    device: torch.device
    nbytes: int
    offset: int = -1  # in the file (disk)
    saved: torch.Tensor | None = None  # memory, cpu


def _model_device(model: nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def resolve_place(where: str, model: nn.Module) -> str:
    """``auto`` made concrete for ``model``: ``cpu`` on a GPU, else ``disk``."""
    if where not in PLACES:
        raise ValueError(f"runtime.original_weights: {where!r} is none of {', '.join(PLACES)}")
    if where != "auto":
        return where
    return "cpu" if _model_device(model).type != "cpu" else "disk"


def _plain(t: torch.Tensor) -> bool:
    return type(t) in (torch.Tensor, nn.Parameter) and type(t.data) is torch.Tensor


def _bytes_view(t: torch.Tensor):
    """A writable byte view (numpy) of a contiguous CPU tensor's own storage."""
    flat = t.detach().reshape(-1)
    return flat.view(torch.uint8).numpy()


class OriginalWeights:
    """The named parameters and buffers of ``model`` (all of them by default, each shared tensor
    once) kept where ``where`` says; ``restore()`` puts them back. A context manager: leaving it
    restores every tensor and releases the copy or the file."""

    def __init__(self, model: nn.Module, where: str = "auto", directory: str | Path | None = None, names=None):
        self.model = model
        self.where = resolve_place(where, model)
        self.entries: dict[str, _Entry] = {}  # one per tensor, under its first name
        self.aliases: dict[str, str] = {}  # every name of a kept tensor -> its entry (tied weights)
        self._file = None
        names_of: dict[int, list[str]] = {}
        owner: dict[int, tuple] = {}
        for module_name, module in model.named_modules(remove_duplicate=False):
            for attr, t, is_param in [
                *((a, p, True) for a, p in module._parameters.items()),
                *((a, b, False) for a, b in module._buffers.items()),
            ]:
                if t is not None:
                    names_of.setdefault(id(t), []).append(f"{module_name}.{attr}" if module_name else attr)
                    owner.setdefault(id(t), (module, attr, is_param, t))
        wanted = None if names is None else set(names)
        for key, all_names in names_of.items():
            if wanted is not None and not wanted.intersection(all_names):
                continue
            self.entries[all_names[0]] = self._entry(*owner[key])
            self.aliases.update(dict.fromkeys(all_names, all_names[0]))
        del owner  # no reference to a tensor outlives this: a replaced one is freed
        if wanted is not None and wanted - set(self.aliases):
            missing = sorted(wanted - set(self.aliases))
            raise KeyError(f"no parameter or buffer named {missing[0]!r} in {type(model).__name__}")
        self._save(directory)

    @staticmethod
    def _entry(module: nn.Module, attr: str, is_param: bool, t: torch.Tensor) -> _Entry:
        return _Entry(
            module,
            attr,
            is_param,
            bool(is_param and t.requires_grad),
            t.dtype,
            t.shape,
            t.device,
            t.numel() * t.element_size(),
        )

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.entries.values())

    def describe(self) -> str:
        """One line for the report: what was kept, where and why."""
        where = {
            "disk": "in a temporary file in the run directory (read back into the model, not held in memory)",
            "memory": "as a copy in memory",
            "cpu": "as a copy in host memory (the model's device keeps one copy)",
        }[self.where]
        return (
            f"The original values of {len(self.entries)} tensors ({self.nbytes / 2**20:,.1f} MiB) were kept {where}, "
            "and put back bit-exact after each change (runtime.original_weights)."
        )

    def _save(self, directory) -> None:
        if self.where == "disk":
            target = Path(directory) if directory is not None else None
            if target is not None:
                target.mkdir(parents=True, exist_ok=True)
            self._file = tempfile.TemporaryFile(dir=target)
            offset = 0
            for name, e in self.entries.items():
                t = getattr(e.module, e.attr).detach()
                data = _bytes_view(t.cpu().contiguous())
                view = memoryview(data).cast("B")
                for start in range(0, len(view), _CHUNK):
                    self._file.write(view[start : start + _CHUNK])
                e.offset = offset
                offset += e.nbytes
            self._file.flush()
            return
        for e in self.entries.values():
            t = getattr(e.module, e.attr).detach()
            e.saved = t.to("cpu", copy=True) if self.where == "cpu" else t.clone()

    def _read(self, e: _Entry, into: torch.Tensor) -> None:
        view = memoryview(_bytes_view(into)).cast("B")
        self._file.seek(e.offset)
        done = 0
        while done < len(view):
            n = self._file.readinto(view[done : done + _CHUNK])
            if not n:
                raise OSError(f"the file of original weights ended early ({done} of {len(view)} bytes)")
            done += n

    def restore(self, names=None) -> None:
        """Put back the tensors ``names`` (default: all) as they were when this was created."""
        with torch.no_grad():
            for name in self.entries if names is None else dict.fromkeys(self.aliases[n] for n in names):
                e = self.entries[name]
                current = getattr(e.module, e.attr)
                fits = (
                    current is not None
                    and _plain(current)
                    and current.dtype == e.dtype
                    and current.shape == e.shape
                    and current.device == e.device
                )
                if fits and self.where == "disk" and current.device.type == "cpu" and current.is_contiguous():
                    self._read(e, current.data)
                elif fits:
                    current.data.copy_(e.saved if self.where != "disk" else self._fresh(e))
                else:
                    value = (e.saved.clone() if self.where != "disk" else self._fresh(e)).to(e.device)
                    if current is not None and _plain(current):  # cast (model.to): same object, so ties hold
                        current.data = value
                    elif e.is_param:  # swapped for a tensor subclass: a plain parameter again
                        e.module._parameters[e.attr] = nn.Parameter(value, requires_grad=e.requires_grad)
                    else:
                        e.module._buffers[e.attr] = value

    def _fresh(self, e: _Entry) -> torch.Tensor:
        out = torch.empty(e.shape, dtype=e.dtype)
        self._read(e, out)
        return out

    def close(self) -> None:
        """Release the copies or the file (the model keeps whatever values it has now)."""
        for e in self.entries.values():
            e.saved = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> OriginalWeights:
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.restore()
        finally:
            self.close()
