"""The ``generic`` kind: any module, run on named example inputs the user declares.

No labels and no tokenizer: what can be measured is the module itself (inspect), its speed, memory
and per-module time (performance), and how far quantization moves its outputs (agreement with the
unquantized outputs on the same inputs).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from modelxray.data.example_inputs import (
    CONSTANT_TYPES,
    ExampleInputs,
    describe_values,
    load_tensors,
    make_tensors,
    normalize_inputs,
)
from modelxray.measure.classifier_reference import input_dtype
from modelxray.models.architecture import type_name


def smallest_embedding(model: nn.Module) -> int | None:
    """Rows of the smallest embedding table (a scripted module's too): integer inputs drawn below it
    index every table."""
    rows = [int(m.weight.shape[0]) for m in model.modules() if type_name(m) == "Embedding"]
    return min(rows) if rows else None


def example_inputs_for(
    model: nn.Module, value: Any, seed: int = 0, allow_unsafe_pickle: bool = False, key: str = "model.inputs"
) -> ExampleInputs:
    """``value`` (a spec mapping, a tensors file, or named tensors) as the tensors the model runs on,
    on its device."""
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    if (
        isinstance(value, dict)
        and any(isinstance(v, torch.Tensor) for v in value.values())
        and all(isinstance(v, (torch.Tensor, *CONSTANT_TYPES)) for v in value.values())
    ):
        tensors, source = dict(value), f"the tensors given ({key})"
    elif isinstance(value, str):
        tensors = load_tensors(value, allow_unsafe_pickle, key)
        source = f"tensors file {value}"
    else:
        spec = normalize_inputs(dict(value), key)
        tensors = make_tensors(spec, seed, input_dtype(model), smallest_embedding(model))
        source = f"config ({key}, seed {seed})"
    tensors = {n: t.to(device) if isinstance(t, torch.Tensor) else t for n, t in tensors.items()}
    return ExampleInputs(tensors=tensors, source=source, description=describe_values(tensors))
