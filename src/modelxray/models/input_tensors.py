"""The tensors a spec of ``models.input_inference`` stands for (seeded, on the model's device), how
many samples one forward of it holds, and one line that says what it is and where it came from."""

from __future__ import annotations

import torch

from modelxray.data.example_inputs import make_tensors


def make_input(spec: dict, device: torch.device, seed: int = 0, dtype: torch.dtype | None = None):
    """Seeded tensors matching ``spec``: token ids uniform over the vocabulary, integer inputs
    uniform below their ``high`` (masks all ones), floating inputs in [0, 1) in ``dtype`` (the
    model's) unless the spec names one. ``named``: a dict keyed by forward's argument names."""
    g = torch.Generator().manual_seed(seed)
    if spec["kind"] == "token_ids":
        return torch.randint(0, spec["vocab_size"], tuple(spec["shape"]), generator=g).to(device)
    if spec["kind"] != "named":
        x = torch.rand(tuple(spec["shape"]), generator=g)
        return x.to(device=device, dtype=dtype or x.dtype)
    tensors = make_tensors(spec["inputs"], seed, dtype)
    return {
        arg: t.to(device) if isinstance(t, torch.Tensor) else t for arg, t in zip(spec["arguments"], tensors.values())
    }


def batch_of(spec: dict) -> int:
    """Samples in one forward of ``spec`` (the first dimension of its first tensor)."""
    return int(spec["shape"][0]) if spec.get("shape") else 1


def describe_input(spec: dict) -> str:
    """One line: what the input is and where it came from."""
    if not spec:
        return "-"
    if spec["kind"] == "unknown":
        return f"unknown: {spec['source']}"
    if spec["kind"] == "named":
        parts = ", ".join(
            f"{n}={e['value']!r}" if "value" in e else f"{n} {e['shape']} {e['dtype']}"
            for n, e in spec["inputs"].items()
        )
        how = (
            "by keyword" if spec["call"] == "keyword" else f"in this order onto forward({', '.join(spec['arguments'])})"
        )
        return f"{parts}, passed {how}; from {spec['source']}"
    extra = ""
    if spec["kind"] == "token_ids":
        extra = f", vocabulary {spec['vocab_size']}" + (
            f", context {spec['context_length']}" if spec.get("context_length") else ""
        )
    return f"{spec['kind']} {spec['shape']}{extra}; from {spec['source']}"
