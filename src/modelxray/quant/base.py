"""The quantizer interface: one verb, ``apply(subject) -> (subject, report)`` (torchao's
``quantize_`` idea), with the config object carrying every choice.

A quantizer never modifies the subject it is given: the base model is cached per process and
shared by every job of a sweep, so quantizers work on a copy. The report is a ``Result`` named
``quant`` (what was done: bits per layer, sizes, weight error, time), logged like an analyzer's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from modelxray.core.configurable import Configurable
from modelxray.core.result import Result


@dataclass
class Quantizer(Configurable):
    name: ClassVar[str] = "quantizer"

    def apply(self, subject) -> tuple[object, Result | None]:  # pragma: no cover - abstract
        raise NotImplementedError
