"""The quantizer interface, torchao's ``quantize_`` idea: a config object carries every choice, and
one code path quantizes a copy of a model. ``modelxray.quantize(model, config)`` and the run's
quant stage (``apply(subject)``) both go through ``modelxray.quant.verb``.

A quantizer works on a copy of the model it is given (the base model is cached per process and
shared by every job of a sweep), unless asked to work ``in_place``: the run's quant stage does
that when nothing needs the loaded weights afterwards, and the analyzers that try one quantizer
after another do it with the originals kept by ``core.original_weights``. The report is a ``Result`` named
``quant`` (what was done: bits per layer, sizes, weight error, time), logged like an analyzer's;
its ``source`` is the quantizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from modelxray.core.configurable import Configurable, implementation
from modelxray.quant.presentation import QuantPresentation

if TYPE_CHECKING:
    from torch import nn

    from modelxray.core.result import Result
    from modelxray.core.subject import Subject
    from modelxray.quant.calibration import Calibration


@dataclass
class Quantizer(QuantPresentation, Configurable):
    name: ClassVar[str] = "quantizer"
    needs_calibration: ClassVar[bool] = False  # GPTQ, AWQ: calibrated on token ids
    # changes the model's own tensors when asked (quantize(..., in_place=True)); False: always a copy
    in_place_capable: ClassVar[bool] = False
    # keeps float weights that hold quantized values (RTN, GPTQ, AWQ): quality is exact, memory and
    # speed are the float model's; False where the quantized weights are stored and run (casts, libraries)
    simulated: ClassVar[bool] = True
    # its quantize() takes ``progress=`` (the run's progress key): work long enough to show a bar
    reports_progress: ClassVar[bool] = False

    float_share_warn: float = 0.1  # warn (console and report) when more than this share of the parameters stays float

    def check(self, model: nn.Module, name: str | None = None) -> None:
        """Checks against the model that must fail before any work (a bit plan matching nothing, a
        TorchScript model): one ``ConfigError`` line naming the model (``name``: its file or config
        name when known, else its class)."""

    def quantize(
        self, model: nn.Module, calibration: Calibration | None = None, *, in_place: bool = False
    ) -> tuple[nn.Module, Result | None]:
        """A quantized copy of ``model`` (``in_place`` and ``in_place_capable``: ``model`` itself,
        quantized) and the report (None: nothing was done)."""
        raise NotImplementedError  # pragma: no cover - abstract

    def step(self, result: Result) -> dict[str, Any]:
        """What ``Subject.applied`` records of this quantization."""
        return {"method": self.name}

    def support_here(self, profile: dict) -> tuple[bool, str]:
        """Whether it runs on this hardware (``measure.hardware.hardware_profile``), and what it
        measures here: the sentence quant_impact's table and report give for it."""
        if not self.simulated:  # optimum-quanto, HQQ: the library's own modules hold and run the weights
            what = self.describe() if hasattr(self, "describe") else self.name
            return True, f"{what} stores and runs its quantized weights: memory and latency are measured"
        return True, "simulated low-bit weights: quality is exact, memory and latency are the float model's"

    def apply(self, subject: Subject, progress: bool = True, in_place: bool = False) -> tuple[Subject, Result | None]:
        """The run's quant stage: the subject with its model quantized (calibrated on its dataset);
        ``progress``: the run's progress key (a calibrating quantizer's bar); ``in_place``: change the
        subject's model itself when the quantizer can."""
        return implementation("modelxray.quant.verb").quantize_subject(subject, self, progress, in_place=in_place)
