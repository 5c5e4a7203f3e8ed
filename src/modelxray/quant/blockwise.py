"""The shared config of calibration-based quantizers (GPTQ, AWQ) and the hooks a method supplies.

The frame itself (``blockwise_impl``): copy the model, run the calibration batches block by block
through each stack of blocks (a decoder; a ViT encoder; both towers of a dual encoder), let the
method quantize each block's planned layers from the inputs that block really sees, feed the
block's outputs to the next, then quantize the planned Linear layers outside the stacks (a
classifier head, a dual encoder's projections) the same way from a forward of the whole model, and
round-to-nearest the other planned modules (embeddings, LM head). A language model calibrates on
its dataset's token windows, a classifier on ``calibration_examples`` of its training split.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from modelxray.core.configurable import implementation
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
    batch_size: int = 8  # calibration windows (or examples) per forward pass
    calibration_examples: int = 128  # classifiers: training examples to calibrate on (LMs: dataset.calibration_windows)
    seed: int = 0  # which training examples calibrate a classifier; AWQ: its token sample

    def validate(self) -> None:
        super().validate()
        self.require_positive("batch_size", "calibration_examples")
        if "conv" in self.targets:
            raise ConfigError(
                "targets",
                f"{self.name} calibrates Linear layers of a model's blocks on token ids or images; "
                "convolutions are not supported: drop conv, or use an RTN config (quant=int8)",
            )

    def check(self, model: nn.Module, name: str | None = None) -> None:
        """Also a model without repeated blocks (an MLP, a CNN) fails here, before any work."""
        from modelxray.quant.calibration import block_stacks

        super().check(model, name)
        block_stacks(model)

    in_place_capable: ClassVar[bool] = True

    def quantize(
        self, model: nn.Module, calibration: Calibration | None = None, *, in_place: bool = False
    ) -> tuple[nn.Module, Result]:
        self.check(model)
        return implementation("modelxray.quant.blockwise_impl").quantize_blockwise(
            self, model, calibration, in_place=in_place
        )

    # -- what a method supplies ---------------------------------------------------------------
    def begin(self) -> None:
        """Reset per-run state before the first block."""

    def quantize_block(self, block, layer_targets, plan, inputs: BlockInputs) -> list[dict]:  # pragma: no cover
        """Quantize ``layer_targets`` of ``block`` in place; return one ``layer_row`` per layer."""
        raise NotImplementedError

    def summary(self) -> tuple[str, dict]:
        """A sentence on how it ran, and extra metrics."""
        return "", {}
