"""A quantizer applied block by block while a streamed model passes (``runtime.offload=blocks``):
the weights of each block are quantized in place right after the float path ran through them, and
the report (per-layer rows, sizes, weight error) is gathered as the blocks go by, so it is the same
report an in-memory quantization of the whole model gives."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from modelxray.models.block_inputs import inside
from modelxray.quant.summary import quant_result
from modelxray.quant.weight import WeightQuantizer, quantize_model

if TYPE_CHECKING:
    from torch import nn

    from modelxray.core.result import Result


def streams_blocks(quantizer) -> bool:
    """Whether a quantizer can work one block at a time: round-to-nearest with its bit plan (fixed by
    names and shapes), and GPTQ and AWQ, which calibrate each block on the inputs it really sees, as
    their papers do; the library quantizers hand the whole model to their library."""
    from modelxray.quant.blockwise import BlockwiseQuantizer

    return (
        type(quantizer) is WeightQuantizer
        or bool(getattr(quantizer, "parts_function", ""))
        or (
            isinstance(quantizer, BlockwiseQuantizer)
            and type(quantizer).quantize_block is not BlockwiseQuantizer.quantize_block
        )
    )


def block_quantization(quantizer, stream, calibration=None) -> BlockQuantization:
    """The quantized path of ``stream``: calibrated block by block when the quantizer calibrates,
    through the library's modules for a library quantizer that swaps layers one by one (HQQ)."""
    if getattr(quantizer, "parts_function", ""):
        return SwapBlockQuantization(quantizer, stream.model, stream.blocks_name)
    if getattr(quantizer, "needs_calibration", False):
        return CalibratedBlockQuantization(quantizer, stream.model, stream.blocks_name, calibration)
    return BlockQuantization(quantizer, stream.model)


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
        self.complete = False  # set by the stream once every module went by

    def touches(self, prefix: str) -> bool:
        return any(self.plan.get(t.name) is not None and inside(t.name, prefix) for t in self.targets)

    def apply(self, prefix: str, done: dict) -> None:
        start = time.perf_counter()
        read = [t for t in self.targets if inside(t.name, prefix) and t.tensor().device.type != "meta"]
        rows, notes = quantize_model(read, self.plan, done)
        self.rows.update({r["module"]: r for r in rows})
        self.notes.extend(n for n in notes if n not in self.notes)
        self.seconds += time.perf_counter() - start

    def result(self, model: nn.Module) -> Result:
        return quant_result(
            self.quantizer.name, self._ordered(), model, self.seconds, self._notes(), source=self.quantizer
        )

    def _ordered(self) -> list[dict]:
        order = {t.name: i for i, t in enumerate(self.targets)}
        return sorted(self.rows.values(), key=lambda r: order.get(r["module"], len(order)))

    def _notes(self) -> list[str]:
        return [*self.notes, "Quantized block by block as the model streamed from disk (runtime.offload=blocks)."]


class CalibratedBlockQuantization(BlockQuantization):
    """GPTQ or AWQ on a streamed model: the calibration windows enter the first block beside the
    evaluated ones; each block's planned Linear layers are calibrated on the inputs it sees (the
    quantized blocks' outputs before it), then the calibration windows go on through the quantized
    block. Planned modules outside the blocks (embeddings, LM head) are rounded to nearest, as in
    memory."""

    def __init__(self, quantizer, model: nn.Module, blocks_name: str, calibration):
        super().__init__(quantizer, model)
        self.model, self.blocks_name, self.calibration = model, blocks_name, calibration
        self.inputs = None
        outside = [
            t.name
            for t in self.targets
            if t.is_linear and self.plan.get(t.name) is not None and not inside(t.name, blocks_name)
        ]
        if outside:  # in memory they are calibrated in a forward of the whole quantized model
            from modelxray.core.errors import ConfigError

            raise ConfigError(
                "runtime.offload",
                f"{quantizer.name} calibrates the Linear layers outside the blocks ({', '.join(outside[:3])}) in a "
                "forward of the whole model, which a streamed run never holds: use runtime.offload=none, or "
                "quant=int4 (round-to-nearest)",
            )

    def calibration_batches(self) -> list:
        return list(self.calibration.batches(self.quantizer.batch_size))

    def start(self, caught: list) -> None:
        """A pass begins: the calibration batches' inputs to the first block, and the method's state reset."""
        from modelxray.quant.calibration import BlockInputs

        self.quantizer.begin()
        self.inputs = BlockInputs.caught(caught)

    def _is_block(self, prefix: str) -> bool:
        head, _, index = prefix.rpartition(".")
        return head == self.blocks_name and index.isdigit()

    def apply(self, prefix: str, done: dict) -> None:
        if not self._is_block(prefix):  # outside the blocks: what the plan rounds to nearest
            start = time.perf_counter()
            read = [
                t
                for t in self.targets
                if inside(t.name, prefix) and not t.is_linear and t.tensor().device.type != "meta"
            ]
            rows, notes = quantize_model(read, self.plan, done)
            for r in rows:
                r["format"] += " (RTN: outside the blocks)"
            self.rows.update({r["module"]: r for r in rows})
            self.notes.extend(n for n in notes if n not in self.notes)
            self.seconds += time.perf_counter() - start
            return
        start = time.perf_counter()
        block = self.model.get_submodule(prefix)
        layer_targets = [t for t in self.targets if inside(t.name, prefix) and t.is_linear and self.plan.get(t.name)]
        if layer_targets:
            rows = self.quantizer.quantize_block(block, layer_targets, self.plan, self.inputs)
            self.rows.update({r["module"]: r for r in rows})
        self.inputs.run(block, update=True)
        self.seconds += time.perf_counter() - start

    def result(self, model: nn.Module) -> Result:
        result = super().result(model)
        how, extra = self.quantizer.summary()
        tokens = sum(h.numel() // h.shape[-1] for h in self.inputs.hidden) if self.inputs is not None else 0
        result.insights.insert(
            0,
            f"{self.quantizer.name.upper()} calibrated each block on {tokens:,} tokens ({self.calibration.n_rows} "
            f"{self.calibration.origin}) as the model streamed; {how}",
        )
        result.data["method"] = self.quantizer.name
        result.metrics.update(extra)
        return result


class SwapBlockQuantization(BlockQuantization):
    """A library quantizer that swaps Linear layers one by one (HQQ) on a streamed model: the chosen
    layers of each block are handed to the library as the block is read and reported as the library
    stores them (as ``library_swap.quantize_linears`` does in memory); ``undo`` puts the block's own
    modules back before the next path runs it. Layers outside the blocks would be swapped inside the
    forward that calls them, so a plan choosing one is refused."""

    def __init__(self, quantizer, model: nn.Module, blocks_name: str):
        from modelxray.core.errors import ConfigError
        from modelxray.quant.library_backend import chosen_linears
        from modelxray.quant.targets import find_targets

        quantizer.check(model)
        self.quantizer, self.model = quantizer, model
        self.targets = find_targets(model)
        self.by_name = {t.name: t for t in self.targets}
        self.chosen = chosen_linears(self.targets, quantizer.skip)
        outside = sorted(n for n in self.chosen if not inside(n, blocks_name))
        if outside:
            raise ConfigError(
                "runtime.offload",
                f"{quantizer.name} would swap Linear layers outside the blocks ({', '.join(outside[:3])}), which a "
                "streamed run reads inside the forward that calls them: add them to quant.skip, or use runtime.offload=none",
            )
        self.parts = quantizer.swap_parts(keep_originals=True)
        self.rows: dict[str, dict] = {}
        self.notes = list(self.parts.notes)
        self.seconds = 0.0
        self.complete = False
        self._swapped: dict[str, nn.Module] = {}  # name -> the block's own module, while swapped

    def touches(self, prefix: str) -> bool:
        return any(inside(n, prefix) for n in self.chosen)

    def apply(self, prefix: str, done: dict) -> None:
        from modelxray.quant.library_swap import conv1d_to_linear
        from modelxray.quant.rtn import relative_error
        from modelxray.quant.summary import layer_row

        names = {n for n in self.chosen if inside(n, prefix) and n not in self._swapped}
        if not names:
            return
        start = time.perf_counter()
        self._swapped.update({n: self.model.get_submodule(n) for n in names})
        conv1d_to_linear(self.model, names)
        weights = {n: self.model.get_submodule(n).weight.detach().clone() for n in names}
        self.parts.swap(self.model, names)
        for name in sorted(names):
            module, w = self.model.get_submodule(name), weights[name]
            error = relative_error(w, self.parts.dequantized(module).to(w.dtype))
            row = layer_row(
                name, w, self.parts.bits, self.parts.fmt, self.parts.stored_bytes(module), error, self.by_name[name]
            )
            self.rows[name] = row
        self.seconds += time.perf_counter() - start

    def undo(self, prefix: str) -> None:
        """The block's own modules back in place of the library's."""
        for name in [n for n in self._swapped if inside(n, prefix)]:
            parent, _, child = name.rpartition(".")
            setattr(self.model.get_submodule(parent) if parent else self.model, child, self._swapped.pop(name))

    def result(self, model: nn.Module) -> Result:
        return quant_result(self.parts.fmt, self._ordered(), model, self.seconds, self._notes(), source=self.quantizer)
