"""The shared config of calibration-based quantizers (GPTQ, AWQ) and the hooks a method supplies.

The frame itself (``blockwise_impl``): copy the model, run the calibration batches block by block,
let the method quantize each block's planned layers from the inputs that block really sees, feed
the block's outputs to the next, and round-to-nearest the planned modules outside the blocks
(embeddings, LM head).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from modelxray.core.errors import ConfigError
from modelxray.quant.weight import WeightQuantizer

if TYPE_CHECKING:
    from torch import nn

    from modelxray.core.result import Result
    from modelxray.quant.calibration import BlockInputs, Calibration


@dataclass
class BlockwiseQuantizer(WeightQuantizer):
    needs_calibration: ClassVar[bool] = True

    targets: list[str] = field(default_factory=lambda: ["linear"])  # linear | embedding | lm_head (no conv)
    batch_size: int = 8  # calibration windows per forward pass

    def validate(self) -> None:
        super().validate()
        self.require_positive("batch_size")
        if "conv" in self.targets:
            raise ConfigError(
                "targets",
                f"{self.name} calibrates Linear layers of a language model's blocks on token ids; "
                "convolutions are not supported: drop conv, or use an RTN config (quant=int8)",
            )

    def quantize(self, model: nn.Module, calibration: Calibration | None = None) -> tuple[nn.Module, Result]:
        from modelxray.quant.blockwise_impl import quantize_blockwise

        self.check(model)
        return quantize_blockwise(self, model, calibration)

    # -- what a method supplies ---------------------------------------------------------------
    def begin(self) -> None:
        """Reset per-run state before the first block."""

    def quantize_block(self, block, layer_targets, plan, inputs: BlockInputs) -> list[dict]:  # pragma: no cover
        """Quantize ``layer_targets`` of ``block`` in place; return one ``layer_row`` per layer."""
        raise NotImplementedError

    def summary(self) -> tuple[str, dict]:
        """A sentence on how it ran, and extra metrics."""
        return "", {}
