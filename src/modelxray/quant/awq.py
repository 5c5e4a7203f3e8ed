"""AWQ (Lin et al., 2023, "AWQ: Activation-aware Weight Quantization for LLM Compression and
Acceleration"), implemented on our RTN formats.

Why our own: the maintained implementations (AutoAWQ, llm-compressor) need CUDA kernels or pin
other transformers versions. AWQ protects the weights that meet large activations: for each group
of layers that read the same input (q/k/v; gate/up; ...), it searches a per-input-channel scale
``s = mean|x|^a / mean|w|^(1-a)`` over a grid of ``a`` in [0, 1), quantizes ``W * s`` and divides by
``s`` again, keeping the ``a`` whose outputs on calibration tokens stay closest to the float
layer (``a = 0`` is plain RTN, so the search never does worse on its sample). It then searches a
per-group clipping ratio of the weight range. In deployment ``1/s`` folds into the previous
operation (a norm's weight or the previous linear's rows) or stays an explicit per-channel
multiply; the simulated weights here equal what such a kernel computes.

This module is the config; the algorithm runs in ``awq_impl`` (imported when it quantizes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from modelxray.core.configurable import implementation
from modelxray.core.errors import ConfigError
from modelxray.quant.blockwise import BlockwiseQuantizer


@dataclass
class AWQQuantizer(BlockwiseQuantizer):
    """AWQ on the decoder blocks' linear layers (per the bit plan), calibrated on
    ``dataset.calibration_windows`` windows after the evaluated tokens; RTN outside the blocks."""

    name: ClassVar[str] = "awq"

    grid: int = 20
    duo_scaling: bool = True
    clip_search: bool = True
    clip_grid: int = 20
    clip_min: float = 0.5
    sample_tokens: int = 4096
    clip_tokens: int = 1024

    def validate(self) -> None:
        super().validate()
        self.require_positive("grid", "clip_grid", "sample_tokens", "clip_tokens")
        if not 0 < self.clip_min <= 1:
            raise ConfigError("clip_min", f"must be in (0, 1], got {self.clip_min}")

    def begin(self) -> None:
        self._ratios: list[float] = []

    def quantize_block(self, block, layer_targets, plan, inputs) -> list[dict]:
        rows, ratios = implementation("modelxray.quant.awq_impl").quantize_block(
            self, block, layer_targets, plan, inputs
        )
        self._ratios += ratios
        return rows

    def summary(self) -> tuple[str, dict]:
        mean = sum(self._ratios) / len(self._ratios) if self._ratios else 0.0
        return (
            f"mean chosen scale exponent {mean:.2f} over {len(self._ratios)} layer groups, clip search "
            f"{'on' if self.clip_search else 'off'}.",
            {"awq_mean_scale_exponent": mean},
        )
