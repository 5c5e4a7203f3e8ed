"""Wall-clock timing of forward passes, with warm-up and device synchronisation."""

from __future__ import annotations

import time

import torch
from torch import nn

from modelxray.core.progress import bar
from modelxray.measure.scoring import device_of, forward_logits


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_forward(
    model: nn.Module,
    input_ids: torch.Tensor | dict,
    warmup: int,
    iters: int,
    progress: bool = True,
    desc: str = "timing",
) -> list[float]:
    """Seconds per forward pass of ``input_ids`` over ``iters`` timed runs after ``warmup`` untimed ones."""
    device = device_of(input_ids)
    times = []
    with torch.inference_mode():
        for _ in range(warmup):
            forward_logits(model, input_ids)
        _sync(device)
        for _ in bar(range(iters), desc=desc, enabled=progress):
            start = time.perf_counter()
            forward_logits(model, input_ids)
            _sync(device)
            times.append(time.perf_counter() - start)
    return times
