"""A quantizer applied block by block while a streamed model passes (``runtime.offload=blocks``):
the weights of each block are quantized in place right after the float path ran through them, and
the report (per-layer rows, sizes, weight error) is gathered as the blocks go by, so it is the same
report an in-memory quantization of the whole model gives."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from modelxray.quant.summary import quant_result
from modelxray.quant.weight import WeightQuantizer, quantize_model

if TYPE_CHECKING:
    from torch import nn

    from modelxray.core.result import Result


def streams_blocks(quantizer) -> bool:
    """Whether a quantizer can work one block at a time: round-to-nearest with its bit plan can (its
    plan is fixed by names and shapes); the calibrating and library quantizers need the whole model."""
    return type(quantizer) is WeightQuantizer


class BlockQuantization:
    """The quantized path of a block stream: ``apply(prefix, done)`` quantizes the read modules under
    ``prefix``; ``result(model)`` is the quant report of everything quantized so far."""

    def __init__(self, quantizer: WeightQuantizer, model: nn.Module):
        quantizer.check(model)
        self.quantizer = quantizer
        self.targets, self.plan = quantizer.plan_for(model)
        self.rows: dict[str, dict] = {}
        self.notes: list[str] = []
        self.seconds = 0.0

    def touches(self, prefix: str) -> bool:
        return any(self.plan.get(t.name) is not None and _inside(t.name, prefix) for t in self.targets)

    def apply(self, prefix: str, done: dict) -> None:
        start = time.perf_counter()
        read = [t for t in self.targets if _inside(t.name, prefix) and t.module.weight.device.type != "meta"]
        rows, notes = quantize_model(read, self.plan, done)
        self.rows.update({r["module"]: r for r in rows})
        self.notes.extend(n for n in notes if n not in self.notes)
        self.seconds += time.perf_counter() - start

    def result(self, model: nn.Module) -> Result:
        order = {t.name: i for i, t in enumerate(self.targets)}
        rows = sorted(self.rows.values(), key=lambda r: order.get(r["module"], len(order)))
        notes = [*self.notes, "Quantized block by block as the model streamed from disk (runtime.offload=blocks)."]
        return quant_result("rtn", rows, model, self.seconds, notes, source=self.quantizer)


def _inside(name: str, prefix: str) -> bool:
    return not prefix or name == prefix or name.startswith(prefix + ".")
