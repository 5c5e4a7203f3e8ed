"""Real low-bit kernels through torchao (``quant=int8_torchao``, ``quant=int8_dynamic_torchao``).

The RTN/GPTQ/AWQ quantizers simulate low-bit weights in float32, which measures accuracy at any
bit width but not memory or speed. torchao swaps each targeted Linear weight for an int8 tensor
subclass whose matmuls run int8 kernels on this CPU (weight-only: int8 weights, float
activations; dynamic: int8 weights and per-token int8 activations), so the performance analyzer
measures the real memory and latency of the quantized model.
"""

from __future__ import annotations

import copy
import fnmatch
import importlib.util
import time
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from modelxray.core.errors import ConfigError
from modelxray.metrics.memory import storage_tensors
from modelxray.quant.base import Quantizer
from modelxray.quant.rtn import relative_error
from modelxray.quant.summary import quant_result
from modelxray.quant.targets import find_targets

METHODS = ("int8_weight_only", "int8_dynamic")


def _config(method: str):
    import logging

    logging.getLogger("torchao").setLevel(logging.ERROR)  # it warns about its CUDA-only extensions on CPU
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig

    return {"int8_weight_only": Int8WeightOnlyConfig, "int8_dynamic": Int8DynamicActivationInt8WeightConfig}[method]()


def _conv1d_to_linear(model: torch.nn.Module, names: set[str]) -> None:
    """Swap GPT-2's Conv1D (weight stored in x out) for the equivalent nn.Linear, which torchao handles."""
    for name in names:
        module = model.get_submodule(name)
        if isinstance(module, torch.nn.Linear):
            continue
        w = module.weight.detach()
        linear = torch.nn.Linear(w.shape[0], w.shape[1], bias=module.bias is not None, dtype=w.dtype, device=w.device)
        with torch.no_grad():
            linear.weight.copy_(w.t())
            if module.bias is not None:
                linear.bias.copy_(module.bias)
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, linear)


@dataclass
class TorchaoQuantizer(Quantizer):
    name: ClassVar[str] = "torchao"

    method: str = "int8_weight_only"
    skip: list[str] = field(default_factory=list)  # glob patterns of module names to leave in float

    def validate(self) -> None:
        self.require_choice("method", METHODS)
        if importlib.util.find_spec("torchao") is None:
            raise ConfigError("method", f"{self.method} needs the torchao package: pip install torchao")

    def apply(self, subject):
        from torchao.quantization import quantize_

        start = time.perf_counter()
        model = copy.deepcopy(subject.model)
        chosen = {
            t.name
            for t in find_targets(model)
            if t.kind == "linear" and not any(fnmatch.fnmatchcase(t.name, p) for p in self.skip)
        }
        _conv1d_to_linear(model, chosen)
        originals = {n: m.weight.detach().clone() for n, m in model.named_modules() if n in chosen}
        quantize_(model, _config(self.method), filter_fn=lambda m, fqn: fqn in chosen)
        rows = []
        for name, module in model.named_modules():
            if name not in chosen:
                continue
            w, orig = module.weight, originals[name]
            deq = w.dequantize() if hasattr(w, "dequantize") else w
            packed = sum(t.numel() * t.element_size() for t in storage_tensors(w))
            rows.append(
                {
                    "module": name,
                    "kind": "linear",
                    "component": "",
                    "block": None,
                    "bits": 8,
                    "format": f"torchao {self.method}",
                    "elements": orig.numel(),
                    "bytes_before": orig.numel() * orig.element_size(),
                    "packed_bytes": packed,
                    "rel_error": relative_error(orig, deq),
                }
            )
        result = quant_result(
            f"torchao {self.method}",
            rows,
            subject.model,
            time.perf_counter() - start,
            [
                f"Real int8 kernels (torchao {self.method}): the performance analyzer measures "
                "their actual memory and latency."
            ],
        )
        return subject.with_model(model, {"method": "torchao", "config": self.method}), result
