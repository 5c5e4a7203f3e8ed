"""compressed-tensors, the checkpoint format of llm-compressor and vLLM (``quant=ct_w4a16``,
``ct_w8a16``, ``ct_w8a8``): the chosen Linear layers get the scheme's scales
from their weights' ranges (llm-compressor's round-to-nearest ``QuantizationModifier``), the model
is compressed by compressed-tensors (int4 packed into int32, int8 as is), saved, and loaded back
through transformers' compressed-tensors loader. The model under analysis is the one the checkpoint
gives, so what is measured is what a user of the saved checkpoint gets.

This module is the config; the work runs in ``ct_impl`` (imported when it quantizes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from modelxray.quant.library_backend import LibraryQuantizer

if TYPE_CHECKING:
    from torch import nn

    from modelxray.core.result import Result

# compressed-tensors' preset schemes: W4A16 (int4 symmetric, groups of 128), W8A16 (int8, groups of
# 128), W8A8 (int8 per output channel, int8 activations per token). W4A16_ASYM is left out: its
# packed zero points do not load back through transformers 5's compressed-tensors loader.
SCHEMES = ("W4A16", "W8A16", "W8A8")


@dataclass
class CompressedTensorsQuantizer(LibraryQuantizer):
    name: ClassVar[str] = "compressed_tensors"
    module: ClassVar[str] = "compressed_tensors"
    pip: ClassVar[str] = "compressed-tensors"
    run_module: ClassVar[str] = "modelxray.quant.ct_impl"
    run_function: ClassVar[str] = "quantize_compressed_tensors"
    # the checkpoint loads decompressed: float weights holding the quantized values (vLLM runs the packed ones)
    simulated: ClassVar[bool] = True
    reports_progress: ClassVar[bool] = True  # compressing, saving and loading the checkpoint

    scheme: str = "W4A16"  # W4A16 | W8A16 | W8A8 (int8 weights and activations)
    group_size: int | None = None  # weights per scale for the grouped schemes; null: the scheme's (128)
    save_dir: str | None = None  # keep the compressed checkpoint here (vLLM loads it); null: a temporary folder

    def validate(self) -> None:
        self.require_choice("scheme", SCHEMES)
        self.require_positive("group_size", allow_none=True)
        if self.group_size is not None and self.scheme == "W8A8":
            from modelxray.core.errors import ConfigError

            raise ConfigError("group_size", "W8A8 scales each output channel; leave group_size null or pick W8A16")
        super().validate()

    def describe(self) -> str:
        return f"compressed-tensors {self.scheme}"

    def effective_group(self) -> int | None:
        """Weights per scale, None for W8A8's one scale per output channel."""
        return None if self.scheme == "W8A8" else (self.group_size or 128)

    def check(self, model: nn.Module, name: str | None = None) -> None:
        super().check(model, name)
        group = self.effective_group()
        if group is None:
            return
        from modelxray.core.errors import ConfigError
        from modelxray.quant.library_backend import chosen_linears
        from modelxray.quant.targets import find_targets

        chosen = chosen_linears(find_targets(model), self.skip)
        widths = {}
        for n, m in model.named_modules():
            if n in chosen:
                widths[n] = getattr(m, "in_features", None) or m.weight.shape[0]  # GPT-2's Conv1D: in x out
        bad = next((n for n, w in widths.items() if w % group), None)
        if bad is not None:
            common = math.gcd(*widths.values())
            fits = max((g for g in (256, 128, 64, 32, 16) if common % g == 0), default=None)
            hint = f" ({fits} does)" if fits else ""
            raise ConfigError(
                "quant.group_size",
                f"{bad} takes {widths[bad]} inputs, not a multiple of {group}: choose a group size that divides "
                f"every layer's{hint}, or skip the layer",
            )

    def step(self, result: Result) -> dict[str, Any]:
        return {"method": "compressed_tensors", "scheme": self.scheme}
