"""Bytes held by the model and the process."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from modelxray.core.formatting import human_bytes


# -- memory ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Memory:
    """Bytes held by the model and the process. The CUDA peaks and the model file are ``None`` when
    not measured (CPU run, model not from a file). ``by_dtype``: ``{"params"|"buffers": {dtype: bytes}}``."""

    param_bytes: int
    buffer_bytes: int
    num_parameters: int
    peak_rss_bytes: int
    rss_bytes: int
    cuda_max_allocated_bytes: int | None = None
    cuda_max_reserved_bytes: int | None = None
    file_bytes: int | None = None
    by_dtype: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)

    @property
    def weight_bytes(self) -> int:
        """The parameters as held in memory (buffers excluded)."""
        return self.param_bytes

    @classmethod
    def aggregate(cls, memories: Sequence[Memory]) -> Memory:
        """The largest reading of every field (a peak over the measurements); ``None`` where none has one."""
        if not memories:
            raise ValueError("no memory measurements to aggregate")
        out: dict[str, Any] = {}
        for f in fields(cls):
            if f.name == "by_dtype":
                continue
            values = [getattr(m, f.name) for m in memories if getattr(m, f.name) is not None]
            out[f.name] = max(values) if values else None
        by_dtype: dict[str, dict[str, int]] = {}
        for m in memories:
            for kind, d in m.by_dtype.items():
                slot = by_dtype.setdefault(kind, {})
                for dt, b in d.items():
                    slot[dt] = max(slot.get(dt, 0), b)
        return cls(**out, by_dtype=by_dtype)

    def _readings(self) -> dict[str, int]:
        """The numeric fields that were measured, in the order they are logged."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name != "by_dtype" and getattr(self, f.name) is not None
        }

    def to_metrics(self, prefix: str = "") -> dict[str, float]:
        return {f"{prefix}{k}": float(v) for k, v in self._readings().items()}

    def to_dict(self) -> dict[str, Any]:
        return {**self._readings(), "by_dtype": {k: dict(v) for k, v in self.by_dtype.items()}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Memory:
        names = {f.name for f in fields(cls)} - {"by_dtype"}
        values = {k: int(v) for k, v in d.items() if k in names and v is not None}
        return cls(**values, by_dtype={k: dict(v) for k, v in (d.get("by_dtype") or {}).items()})

    def __str__(self) -> str:
        parts = [
            f"weights {human_bytes(self.param_bytes)} ({self.num_parameters:,} parameters)",
            f"RSS {human_bytes(self.rss_bytes)} (peak {human_bytes(self.peak_rss_bytes)})",
        ]
        if self.cuda_max_allocated_bytes is not None:
            reserved = self.cuda_max_reserved_bytes
            parts.append(
                f"CUDA peak {human_bytes(self.cuda_max_allocated_bytes)} allocated"
                + (f" / {human_bytes(reserved)} reserved" if reserved is not None else "")
            )
        if self.file_bytes is not None:
            parts.append(f"file {human_bytes(self.file_bytes)}")
        return ", ".join(parts)

    def markdown(self) -> str:
        return str(self)
