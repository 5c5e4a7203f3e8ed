"""The evaluation loop shared by analyzers: forward windows, accumulate LM metrics.

It adds as little as possible to the model's own forward: ``torch.inference_mode``, no KV cache,
one fused pass over the scored logits for loss and every top-k (``scripts/bench_eval.py`` holds it
to at least 0.97 of a bare ``model(input_ids)`` loop).
"""

from __future__ import annotations

import functools
import time
from typing import Any

import torch
from torch import nn

from modelxray.core.progress import bar
from modelxray.metrics.lm import LMScore
from modelxray.metrics.windows import NamedTensors, Window, batched


def logits_of(output: Any) -> torch.Tensor:
    """Logits from whatever a model returns: a tensor, a ModelOutput/dict with ``logits``, or a tuple
    (a ModelOutput without logits, a vision backbone's: its first tensor)."""
    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "logits"):
        return output.logits
    if isinstance(output, dict) and "logits" in output:
        return output["logits"]
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    if hasattr(output, "to_tuple") and output.to_tuple():  # a backbone's output: its first tensor (hidden states)
        return output.to_tuple()[0]
    raise TypeError(f"cannot find logits in a model output of type {type(output).__name__}")


def is_hf_model(model: nn.Module) -> bool:
    return hasattr(model, "config") and hasattr(model, "generate")


def _takes_use_cache(model: nn.Module) -> bool:
    if getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        return True
    return _forward_takes_use_cache(type(model))


@functools.cache
def _forward_takes_use_cache(cls: type) -> bool:
    """Whether a model class's forward takes ``use_cache`` (read once per class: forwards are hot)."""
    import inspect

    try:
        return "use_cache" in inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):
        return False


def forward_logits(model: nn.Module, input_ids: torch.Tensor | dict[str, torch.Tensor]) -> Any:
    """One forward pass: token ids (no KV cache for a Hugging Face LM), one input tensor, or named
    tensors passed by keyword (a generic model), whose whole output is returned; ``NamedTensors``
    (a model of another task: an encoder, a seq2seq or speech model), whose logits are returned."""
    if isinstance(input_ids, NamedTensors):
        extra = {"use_cache": False} if _takes_use_cache(model) else {}  # no KV cache built, none replayed
        logits = logits_of(model(**_floating(model, input_ids), **extra))
        return logits.unsqueeze(1) if logits.dim() == 2 else logits  # one label per text: one scored position
    if isinstance(input_ids, dict):
        return model(**input_ids)
    if is_hf_model(model):
        return logits_of(model(input_ids=input_ids, use_cache=False))
    return logits_of(model(input_ids))


def input_dtype(model: nn.Module) -> torch.dtype:
    """The dtype of the model's first floating-point parameter (float32 when it has none)."""
    for p in model.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32


def _floating(model: nn.Module, inputs: NamedTensors) -> dict:
    """Named inputs with floating tensors (audio features) in the model's floating dtype, so a cast
    model (fp16, bf16) gets inputs it can multiply."""
    dtype = input_dtype(model)
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in inputs.items()}


def device_of(inputs: torch.Tensor | dict[str, torch.Tensor]) -> torch.device:
    """Where an input (a tensor, or the first of named tensors) lives."""
    return next(iter(dict.values(inputs))).device if isinstance(inputs, dict) else inputs.device


def model_device(model: nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def score_windows(
    model: nn.Module,
    windows: list[Window],
    batch_size: int,
    ks: list[int],
    progress: bool = True,
    desc: str = "scoring",
) -> tuple[LMScore, float]:
    """Score ``windows`` in batches; returns the accumulated score and the wall time in seconds."""
    device = model_device(model)
    score = LMScore(ks=sorted(set(ks)))
    total = sum(w.inputs.numel() for w in windows)
    start = time.perf_counter()
    with torch.inference_mode(), bar(total=total, desc=desc, unit="tok", enabled=progress) as pbar:
        for inputs, targets in batched(windows, batch_size):
            logits = forward_logits(model, to_device(inputs, device))
            score.update(logits, to_device(targets, device))
            pbar.update(inputs.numel())
        score.settle()  # the sums read back (the GPU done) inside the timed span
    return score, time.perf_counter() - start


def to_device(batch, device: torch.device):
    """A batch on ``device``. Onto a GPU, a tensor is copied from pinned host memory without the host
    waiting: a plain copy would wait for the batch before it to finish, and the GPU would then idle
    while the host queues this batch's forward."""
    if device.type == "cuda" and isinstance(batch, torch.Tensor) and batch.device.type == "cpu":
        return batch.pin_memory().to(device, non_blocking=True)
    return batch.to(device)
