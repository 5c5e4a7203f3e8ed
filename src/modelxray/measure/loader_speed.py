"""Forward-pass speed on a user's own batches (``ModelAnalyzer``'s ``benchmark_inference_speed(data_loader)``).

The performance analyzer times synthetic batches of chosen sizes; this times the batches the user's
DataLoader yields, as they come (one warm-up pass on the first, then one timed pass per batch), so
the figure is the speed of that workload. Batches of token ids in any common shape
(``metrics.token_batches``).
"""

from __future__ import annotations

import itertools
import time

import torch

from modelxray.core.errors import ConfigError
from modelxray.core.progress import bar
from modelxray.measure.scoring import forward_logits
from modelxray.measure.speed import _sync
from modelxray.metrics.measurements import Latency, Speed
from modelxray.metrics.token_batches import token_batch


def _ids(batch) -> torch.Tensor:
    return token_batch(batch, "data_loader").ids


def time_loader(model: torch.nn.Module, loader, iters: int, progress: bool = False) -> Speed:
    """Speed of ``model`` on the first ``iters`` batches of ``loader`` (batch size and length of the
    first batch; a batch of another shape ends the timing, so the figure is of one shape)."""
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    batches = [_ids(b) for b in itertools.islice(iter(loader), max(iters, 1) + 1)]
    if not batches:
        raise ConfigError("data_loader", "yields no batches")
    shape = batches[0].shape
    same = [b.to(device) for b in itertools.takewhile(lambda b: b.shape == shape, batches)]
    times = []
    with torch.inference_mode():
        forward_logits(model, same[0])  # warm-up
        _sync(device)
        for ids in bar(same[-iters:] if len(same) > iters else same, desc="speed on your batches", enabled=progress):
            start = time.perf_counter()
            forward_logits(model, ids)
            _sync(device)
            times.append(time.perf_counter() - start)
    return Speed(int(shape[0]), int(shape[1]), Latency.from_values(times))
