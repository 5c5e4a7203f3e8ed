"""The shared frame of calibration-based quantizers (GPTQ, AWQ): copy the model, run the
calibration windows block by block, let the method quantize each block's planned layers from the
inputs that block really sees, feed the block's outputs to the next, and round-to-nearest the
planned modules outside the blocks (embeddings, LM head)."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

from modelxray.core.progress import bar
from modelxray.quant.calibration import BlockInputs, calibration_windows, decoder_blocks
from modelxray.quant.rtn import QuantSpec, packed_bits, relative_error
from modelxray.quant.summary import quant_result
from modelxray.quant.weight import WeightQuantizer, quantize_model


def layer_row(t, spec: QuantSpec, w, q) -> dict:
    return {
        "module": t.name,
        "kind": t.kind,
        "component": t.component,
        "block": t.block,
        "bits": spec.bits,
        "format": spec.describe(),
        "elements": w.numel(),
        "bytes_before": w.numel() * w.element_size(),
        "packed_bytes": packed_bits(tuple(w.shape), spec) / 8,
        "rel_error": relative_error(w, q),
    }


@dataclass
class BlockwiseQuantizer(WeightQuantizer):
    batch_size: int = 8  # calibration windows per forward pass

    def validate(self) -> None:
        super().validate()
        self.require_positive("batch_size")

    # -- what a method supplies ---------------------------------------------------------------
    def begin(self) -> None:
        """Reset per-run state before the first block."""

    def quantize_block(self, block, layer_targets, plan, inputs: BlockInputs) -> list[dict]:  # pragma: no cover
        """Quantize ``layer_targets`` of ``block`` in place; return one ``layer_row`` per layer."""
        raise NotImplementedError

    def summary(self) -> tuple[str, dict]:
        """A sentence on how it ran, and extra metrics."""
        return "", {}

    # -- the frame -----------------------------------------------------------------------------
    def apply(self, subject):
        start = time.perf_counter()
        self.plan_for(subject.model)  # a bad plan fails before any work
        windows = calibration_windows(subject)
        model = copy.deepcopy(subject.model)
        targets, plan = self.plan_for(model)
        _, blocks = decoder_blocks(model)
        inputs = BlockInputs(model, blocks, windows, self.batch_size)
        by_module = {t.module: t for t in targets if plan.get(t.name) is not None}
        self.begin()
        rows, done = [], set()
        for block in bar(blocks, desc=f"{self.name}: blocks"):
            layer_targets = [by_module[m] for m in block.modules() if m in by_module]
            if layer_targets:
                rows += self.quantize_block(block, layer_targets, plan, inputs)
                done.update(t.name for t in layer_targets)
            inputs.run(block, update=True)
        rest = {t.name: plan[t.name] for t in targets if t.name not in done}
        rtn_rows, notes = quantize_model([t for t in targets if t.name in rest], rest)
        for r in rtn_rows:
            r["format"] += " (RTN: outside the blocks)"
        how, extra = self.summary()
        notes.insert(
            0,
            f"{self.name.upper()} calibrated on {inputs.n_tokens:,} tokens ({windows.shape[0]} windows "
            f"after the evaluated span); {how}",
        )
        result = quant_result(self.name, rows + rtn_rows, model, time.perf_counter() - start, notes)
        result.metrics.update(extra)
        step = {
            "method": self.name,
            "default": self.default_spec().describe(),
            "effective_bits": round(result.metrics["effective_bits"], 3),
        }
        return subject.with_model(model, step), result
