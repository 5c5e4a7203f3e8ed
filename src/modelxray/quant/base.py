"""The quantizer interface: one verb, ``apply(subject) -> subject`` (torchao's ``quantize_`` idea),
with the config object carrying every choice. A quantizer must not modify the subject it is given:
the base model is cached per process and shared by every job of a sweep."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from modelxray.configurable import Configurable


@dataclass
class Quantizer(Configurable):
    name: ClassVar[str] = "quantizer"

    def apply(self, subject) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def is_identity(self) -> bool:
        return False
