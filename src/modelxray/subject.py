"""The thing under analysis: a model, its tokenizer, its data and where it came from."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from torch import nn

from modelxray.data.base import ClassificationData, TokenData
from modelxray.models.base import ModelInfo


@dataclass
class Subject:
    model: nn.Module
    tokenizer: Any
    data: TokenData | ClassificationData | None
    info: ModelInfo
    task: str = "causal_lm"  # causal_lm | classification
    batches: Any = None  # a user's DataLoader (Python API); used instead of windows over ``data``
    applied: list[dict[str, Any]] = field(default_factory=list)  # transformations (quantization...) so far

    def with_model(self, model: nn.Module, step: dict[str, Any]) -> Subject:
        """A copy of this subject holding a transformed model, recording the step that made it."""
        return replace(self, model=model, applied=[*self.applied, step])
