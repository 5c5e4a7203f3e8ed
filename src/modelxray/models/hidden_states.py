"""What a block stream holds between blocks and what it cost: each variant's hidden states (in
memory up to a budget, on disk beyond it) and the stream's reads."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import torch


class HiddenStates:
    """One variant's hidden states, per batch: in memory up to ``budget`` bytes, on disk beyond it."""

    _names = itertools.count()  # spill files are never reused while a mapped one may be read

    def __init__(self, budget: int | None, spill_dir: Path):
        self.budget, self.spill_dir = budget, spill_dir
        self.items: list[torch.Tensor | Path] = []
        self.in_memory = 0
        self.spilled = 0

    def replace(self, other: HiddenStates) -> None:
        """Take ``other``'s states (the next block's), deleting this one's files from disk."""
        for item in self.items:
            if isinstance(item, Path):
                item.unlink(missing_ok=True)
        self.items, self.in_memory, self.spilled = other.items, other.in_memory, other.spilled

    def append(self, hidden: torch.Tensor) -> None:
        size = hidden.numel() * hidden.element_size()
        if self.budget is not None and self.in_memory + size > self.budget:
            path = self.spill_dir / f"hidden_{next(self._names)}.pt"
            torch.save(hidden.detach().cpu(), path)
            self.items.append(path)
            self.spilled += size
        else:
            self.items.append(hidden)
            self.in_memory += size

    def __getitem__(self, i: int) -> torch.Tensor:
        item = self.items[i]
        return torch.load(item, weights_only=True, mmap=True) if isinstance(item, Path) else item

    def __len__(self) -> int:
        return len(self.items)


@dataclass
class StreamStats:
    """What streaming cost: bytes read, passes over the model, hidden states held and spilled."""

    bytes_read: int = 0
    passes: int = 0
    hidden_bytes: int = 0
    spilled_bytes: int = 0

    def weight_reads(self, model_bytes: int) -> float:
        return self.bytes_read / model_bytes if model_bytes else 0.0

    def mark(self) -> tuple[int, int]:
        """Where the stream stands now (passes, bytes read), for ``since``."""
        return self.passes, self.bytes_read

    def since(self, mark: tuple[int, int], model_bytes: int) -> dict[str, float]:
        """What one analyzer's work cost since ``mark``: its reads of the model and the bytes read
        over the weights' bytes."""
        passes, read = mark
        return {
            "reads": self.passes - passes,
            "weight_reads": (self.bytes_read - read) / model_bytes if model_bytes else 0.0,
        }
