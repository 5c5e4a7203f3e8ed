"""llama.cpp's own quantizer (``quant=gguf_q4_k_m``, ``gguf_q8_0``, ``gguf_q6_k`` ...): the weights
a GGUF of this model would hold after ``llama-quantize``, so a model from any source can be compared
with the files people deploy, in the same sweep as modelxray's own quantizers.

The model's weights are written as an F32 GGUF file (the ``gguf`` package), quantized by llama.cpp
(``llama_model_quantize`` of llama-cpp-python, the library behind ``llama-quantize``: it picks each
tensor's type by its role, e.g. Q6_K for some ``attn_v``/``ffn_down`` tensors in Q4_K_M), and read
back dequantized by the ``gguf`` package. Quality is that of llama.cpp's stored weights computed in
PyTorch's float kernels; llama.cpp's kernels also round activations to 8 bits (``model.engine=
llama_cpp`` on a GGUF file measures that). Sizes are the bytes llama.cpp stores.

This module is the config; the work runs in ``gguf_impl`` (imported when it quantizes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from modelxray.quant.library_backend import LibraryQuantizer

if TYPE_CHECKING:
    from modelxray.core.result import Result

# llama.cpp's file types that need no importance matrix (llama-quantize refuses IQ2_XXS, IQ2_XS,
# IQ2_S, IQ1_S, IQ1_M and Q2_K_S without one)
TYPES = (
    "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_1", "Q5_0", "Q4_K_M", "Q4_K_S", "Q4_1", "Q4_0", "IQ4_XS",
    "IQ4_NL", "Q3_K_L", "Q3_K_M", "Q3_K_S", "IQ3_M", "IQ3_S", "IQ3_XXS", "Q2_K", "BF16", "F16",
)  # fmt: skip


@dataclass
class GGUFQuantizer(LibraryQuantizer):
    name: ClassVar[str] = "gguf"
    module: ClassVar[str] = "llama_cpp"
    pip: ClassVar[str] = "llama-cpp-python (it builds llama.cpp, about 10 minutes)"
    extra: ClassVar[str] = "llama_cpp"
    run_module: ClassVar[str] = "modelxray.quant.gguf_impl"
    run_function: ClassVar[str] = "quantize_gguf"
    # llama.cpp's stored weights, dequantized into the float model: memory and speed are PyTorch's
    simulated: ClassVar[bool] = True
    reports_progress: ClassVar[bool] = True  # llama.cpp's quantizer reports each tensor

    type: str = "Q4_K_M"  # llama.cpp's file type: Q8_0, Q6_K, Q5_K_M, Q4_K_M, IQ4_XS, Q3_K_M, Q2_K ...
    threads: int = 0  # threads of llama.cpp's quantizer; 0: the run's torch threads

    def validate(self) -> None:
        self.require_choice("type", TYPES)
        if self.threads < 0:
            from modelxray.core.errors import ConfigError

            raise ConfigError("threads", f"must be 0 (the run's threads) or more, got {self.threads}")
        super().validate()

    def describe(self) -> str:
        return f"llama.cpp {self.type}"

    def step(self, result: Result) -> dict[str, Any]:
        return {"method": "gguf", "type": self.type}
