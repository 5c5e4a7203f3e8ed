"""What a Python caller hands a run instead of configuring it (``modelxray.analyze(model=...)``), and
the one-line error when a model comes without what feeds it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from modelxray.core.errors import ConfigError


@dataclass
class Given:
    """What a Python caller handed in instead of configuring it: a model and what feeds it."""

    model: torch.nn.Module | None = None
    tokenizer: Any = None
    batches: Any = None
    image_shape: tuple[int, int, int] | None = None
    example_inputs: Any = None
    processor: Any = None

    def check(self) -> None:
        feeds = (self.tokenizer, self.batches, self.image_shape, self.example_inputs, self.processor)
        if self.model is not None and all(g is None for g in feeds) and not _vision_kind(self.model):
            raise ConfigError(
                "tokenizer",
                "an in-memory model needs a tokenizer or a dataloader of token batches (a language model), "
                "image_shape (an image classifier), a processor (a transformers detector, segmenter, "
                "vision-language or speech model) or example_inputs (any other module)",
            )


def _vision_kind(model: torch.nn.Module) -> bool:
    """A transformers image classifier, detector, segmenter or backbone: it needs nothing beside
    itself (its input size is in its config; a detector says in one line that it needs its image
    processor)."""
    from modelxray.kinds.table import kind_of_architecture

    kind = kind_of_architecture(type(model).__name__) if hasattr(model, "config") else None
    return kind is not None and kind.needs_nothing_beside
