"""GPTQ (Frantar et al., 2022, "GPTQ: Accurate Post-Training Quantization for Generative
Pre-trained Transformers"), implemented on our RTN formats.

Why our own: llm-compressor pins an older transformers and rejects a 128 group on a 576-wide
layer; gptqmodel builds CUDA extensions. The algorithm is short: quantize a weight column by
column and push each column's rounding error onto the columns not yet quantized, weighted by
the inverse Hessian of the layer's calibration inputs (H = 2 X X^T / n), in lazy blocks of
``block_size`` columns. ``act_order`` processes columns by decreasing H diagonal; groups then keep
their contiguous layout (static groups: scales from the weights before any update), so the packed
format is the same as RTN's. Without ``act_order`` a group's scale is computed when its first
column is reached, from the already-updated weights, as in the reference implementation.

This module is the config; the algorithm runs in ``gptq_impl`` (imported when it quantizes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from modelxray.core.configurable import implementation
from modelxray.core.errors import ConfigError
from modelxray.quant.blockwise import BlockwiseQuantizer


@dataclass
class GPTQQuantizer(BlockwiseQuantizer):
    """GPTQ on the decoder blocks' linear layers (per the bit plan), calibrated on
    ``dataset.calibration_windows`` windows after the evaluated tokens; RTN for planned modules
    outside the blocks (embeddings, LM head)."""

    name: ClassVar[str] = "gptq"

    act_order: bool = True
    damp: float = 0.01
    block_size: int = 128
    clip_grid: int = 0  # > 1: search each group's range shrink in [clip_min, 1] (0: plain min/max)
    clip_min: float = 0.8

    def validate(self) -> None:
        super().validate()
        self.require_positive("damp", "block_size")
        self.require_non_negative("clip_grid")
        if not 0 < self.clip_min <= 1:
            raise ConfigError("clip_min", f"must be in (0, 1], got {self.clip_min}")

    def quantize_block(self, block, layer_targets, plan, inputs) -> list[dict]:
        return implementation("modelxray.quant.gptq_impl").quantize_block(self, block, layer_targets, plan, inputs)

    def summary(self) -> tuple[str, dict]:
        return f"act_order={self.act_order}, damp={self.damp}, range search grid {self.clip_grid}.", {}
