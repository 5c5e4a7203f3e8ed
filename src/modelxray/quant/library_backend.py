"""The config side of quantizers that run through another library (torchao, optimum-quanto, HQQ):
the Linear layers they take, the globs that leave some in float, and the one-line errors when the
library is missing or nothing matches. Config only: no torch, no library import."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from modelxray.core.configurable import implementation
from modelxray.core.errors import ConfigError, require_library
from modelxray.quant.base import Quantizer

if TYPE_CHECKING:
    from torch import nn

    from modelxray.core.result import Result


@dataclass
class LibraryQuantizer(Quantizer):
    """Base of the quantizers that hand a copy's Linear layers to a library."""

    module: ClassVar[str] = ""  # the library's import name, checked before any work
    pip: ClassVar[str] = ""  # what installs it
    extra: ClassVar[str] = "quantizers"  # the project's extra that holds it
    run_module: ClassVar[str] = ""  # the module that quantizes (imported only when it runs) ...
    run_function: ClassVar[str] = ""  # ... and its function(quantizer, model[, progress]) -> (model, Result)
    simulated: ClassVar[bool] = False  # the library's modules hold and run the quantized weights
    # the function of run_module giving its SwapParts(quantizer, keep_originals), for a model streamed
    # block by block; empty: the library takes the whole model at once
    parts_function: ClassVar[str] = ""

    skip: list[str] = field(default_factory=list)  # glob patterns of module names to leave in float

    def validate(self) -> None:
        require_library("quant", self.describe(), self.module, self.pip, self.extra)

    def describe(self) -> str:
        """The quantization in words, for messages and the report."""
        return self.name

    def swap_parts(self, keep_originals: bool = False):
        """The library's ``SwapParts`` (``run_module.parts_function``), for quantizing block by block."""
        return getattr(implementation(self.run_module), self.parts_function)(self, keep_originals)

    def quantize(
        self, model: nn.Module, calibration: Any = None, *, in_place: bool = False, progress: bool = True
    ) -> tuple[nn.Module, Result]:
        """A quantized copy, made by ``run_module.run_function`` (given ``progress`` when the quantizer
        reports it); the config never imports its implementation."""
        self.check(model)
        run = getattr(implementation(self.run_module), self.run_function)
        return run(self, model, progress) if self.reports_progress else run(self, model)

    def check(self, model: nn.Module, name: str | None = None) -> None:
        """Nothing to quantize (a TorchScript model, no Linear layer, everything skipped) fails here."""
        from modelxray.quant.targets import find_targets, no_match_message

        targets = find_targets(model)
        if not chosen_linears(targets, self.skip):
            what = f"{self.describe()} (targets linear" + (f"; skip {', '.join(self.skip)})" if self.skip else ")")
            raise ConfigError("quant", no_match_message(what, model, targets, name))


def chosen_linears(targets: list, skip: list[str]) -> set[str]:
    """Names of the Linear modules a library quantizes: every ``linear`` target not matched by a
    ``skip`` glob. An expert of a fused mixture-of-experts tensor is a slice, not a module
    (``chosen_experts``)."""
    return {t.name for t in targets if t.is_linear and t.expert is None and not _skipped(t.name, skip)}


def chosen_experts(targets: list, skip: list[str]) -> list:
    """The experts of fused mixture-of-experts tensors (``Target.expert``) not matched by a ``skip`` glob."""
    return [t for t in targets if t.expert is not None and not _skipped(t.name, skip)]


def _skipped(name: str, skip: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in skip)
