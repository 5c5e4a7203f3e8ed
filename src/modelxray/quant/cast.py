"""``quant=fp16`` / ``quant=bf16``: cast a copy of the model to a 16-bit float type."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import ClassVar

import torch

from modelxray.quant.base import Quantizer
from modelxray.quant.rtn import relative_error
from modelxray.quant.summary import quant_result

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class CastQuantizer(Quantizer):
    name: ClassVar[str] = "cast"

    dtype: str = "bfloat16"

    def validate(self) -> None:
        self.require_choice("dtype", _DTYPES)

    def apply(self, subject):
        start = time.perf_counter()
        model = copy.deepcopy(subject.model)
        rows, seen = [], set()
        for name, p in subject.model.named_parameters():
            if p.data_ptr() in seen or not p.is_floating_point():
                continue
            seen.add(p.data_ptr())
            cast = p.detach().to(_DTYPES[self.dtype])
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
        model.to(_DTYPES[self.dtype])
        result = quant_result(f"cast to {self.dtype}", rows, subject.model, time.perf_counter() - start, [])
        return subject.with_model(model, {"method": "cast", "dtype": self.dtype}), result
