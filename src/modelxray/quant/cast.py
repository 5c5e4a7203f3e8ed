"""``quant=fp16`` / ``quant=bf16``: cast a copy of the model to a 16-bit float type."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from modelxray.quant.base import Quantizer
from modelxray.quant.rtn import relative_error
from modelxray.quant.summary import quant_result

if TYPE_CHECKING:
    from torch import nn

    from modelxray.core.result import Result

DTYPES = ("float16", "bfloat16")  # torch dtype names


@dataclass
class CastQuantizer(Quantizer):
    name: ClassVar[str] = "cast"
    simulated: ClassVar[bool] = False  # real 16-bit weights

    dtype: str = "bfloat16"

    def validate(self) -> None:
        self.require_choice("dtype", DTYPES)

    def support_here(self, profile: dict) -> tuple[bool, str]:
        if self.dtype == "float16" and not profile["gpus"]:
            return True, "float16 runs on this CPU but usually slower than float32 (no fp16 matmul units)"
        return True, "real 16-bit weights: memory and latency are measured"

    in_place_capable: ClassVar[bool] = True

    def quantize(
        self, model: nn.Module, calibration: Any = None, *, in_place: bool = False
    ) -> tuple[nn.Module, Result]:
        import torch

        dtype = getattr(torch, self.dtype)
        start = time.perf_counter()
        rows, seen = [], set()
        for name, p in model.named_parameters():
            if p.data_ptr() in seen or not p.is_floating_point():
                continue
            seen.add(p.data_ptr())
            cast = p.detach().to(dtype)
            rows.append(
                {
                    "module": name,
                    "kind": "parameter",
                    "component": "",
                    "block": None,
                    "bits": 16,
                    "format": self.dtype,
                    "elements": p.numel(),
                    "bytes_before": p.numel() * p.element_size(),
                    "packed_bytes": p.numel() * 2,
                    "rel_error": relative_error(p, cast),
                }
            )
        result = quant_result(f"cast to {self.dtype}", rows, model, 0.0, [], source=self)  # sizes as loaded
        if not in_place:
            model = copy.deepcopy(model)
        model.to(dtype)
        result.metrics["seconds"] = time.perf_counter() - start
        return model, result

    def step(self, result: Result) -> dict[str, Any]:
        return {"method": "cast", "dtype": self.dtype}
