"""A model directory's safetensors weights, read by tensor name, a group at a time.

``runtime.offload=blocks`` reads one block of a model at a time: this finds each tensor's file (one
``model.safetensors`` or the shards an ``model.safetensors.index.json`` maps), tells sizes from the
files' headers without reading any weight, and reads a group of tensors with each file memory-mapped
only while it is read (``safe_open`` closed after the group), so no mapped page outlives its block.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

from modelxray.core.errors import ConfigError

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
DTYPE_BYTES.update({"F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8})


def has_safetensors(directory: Path) -> bool:
    return (directory / INDEX).is_file() or (directory / SINGLE).is_file()


class SafetensorsDir:
    """The tensors of one model directory: ``names``, ``shapes`` and ``nbytes`` from the headers alone,
    ``read(names)`` for the tensors themselves."""

    def __init__(self, directory: Path, key: str = "model.name_or_path"):
        self.directory = Path(directory)
        if (self.directory / INDEX).is_file():
            index = _read_json(self.directory / INDEX, key)
            weight_map = index.get("weight_map") if isinstance(index, dict) else None
            if not isinstance(weight_map, dict) or not weight_map:
                raise ConfigError(key, f"{self.directory / INDEX} has no weight_map; save the model again")
            self.file_of = {str(k): self.directory / str(v) for k, v in weight_map.items()}
        elif (self.directory / SINGLE).is_file():
            self.file_of = {}
            for name in _header(self.directory / SINGLE, key):
                self.file_of[name] = self.directory / SINGLE
        else:
            raise ConfigError(
                key,
                f"{self.directory} holds no safetensors weights ({SINGLE} or {INDEX}), which streaming reads "
                "one tensor at a time: save the model with save_pretrained (safetensors is its default), or use "
                "runtime.offload=none",
            )
        self.headers: dict[str, dict] = {}
        for file in sorted(set(self.file_of.values())):
            header = _header(file, key)
            for name in [n for n, f in self.file_of.items() if f == file]:
                if name not in header:
                    raise ConfigError(key, f"{INDEX} maps {name} to {file.name}, which does not hold it")
                self.headers[name] = header[name]

    @property
    def names(self) -> set[str]:
        return set(self.file_of)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.headers[name]["shape"])

    def nbytes(self, names=None, dtype_bytes: int | None = None) -> int:
        """Bytes of ``names`` (all by default) as stored, or at ``dtype_bytes`` per element when given."""
        total = 0
        for name in self.names if names is None else names:
            header = self.headers[name]
            count = 1
            for d in header["shape"]:
                count *= int(d)
            total += count * (dtype_bytes or DTYPE_BYTES.get(header["dtype"], 4))
        return total

    def read(self, names, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """The tensors ``names`` (floating ones cast to ``dtype``), each copied out of its file with the
        file mapped only while that one tensor is read: the pages a read touched are let go at once,
        so a block's read holds the block and one tensor's pages, never the block twice."""
        from safetensors import safe_open

        out = {}
        for name in names:
            with safe_open(str(self.file_of[name]), framework="pt") as handle:
                tensor = handle.get_tensor(name)
                if dtype is not None and tensor.is_floating_point() and tensor.dtype != dtype:
                    tensor = tensor.to(dtype)
                out[name] = tensor.clone() if _maps(tensor) else tensor
        return out


def _maps(tensor: torch.Tensor) -> bool:
    """Whether a tensor still points into a mapped file (then it is copied, so the map can close)."""
    try:
        return not tensor.untyped_storage().resizable()
    except (RuntimeError, NotImplementedError):
        return True


def _read_json(path: Path, key: str) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(key, f"{str(path)!r} cannot be read as JSON ({exc}); save the model again") from None


def _header(file: Path, key: str) -> dict[str, dict]:
    """A safetensors file's header (name -> dtype, shape, offsets), read without touching a weight."""
    try:
        with open(file, "rb") as handle:
            (size,) = struct.unpack("<Q", handle.read(8))
            if size > 100_000_000:
                raise ValueError(f"a header of {size} bytes")
            header = json.loads(handle.read(size))
    except (OSError, struct.error, ValueError) as exc:
        raise ConfigError(key, f"{file} is not a readable safetensors file ({exc}); save the model again") from None
    header.pop("__metadata__", None)
    return header
