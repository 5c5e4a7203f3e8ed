"""Per-process model cache: a Hydra multirun runs its jobs in one process, so a sweep over
dataset or analyzer settings loads the base model once. Analyses that change weights work on a
copy (see ``modelxray.quant``), never on the cached model."""

from __future__ import annotations

import time
from collections import OrderedDict

import torch

from modelxray.core.subject import LoadedModel
from modelxray.measure.memory_timeline import MemoryTimeline
from modelxray.models.base import ModelSource

_CACHE: OrderedDict[str, LoadedModel] = OrderedDict()


def lookup(source: ModelSource, capacity: int = 1) -> tuple[LoadedModel, bool]:
    """``(model, hit)``: ``source`` from the cache (hit) or freshly loaded; keeps at most ``capacity``
    models (0 disables the cache)."""
    key = source.cache_key()
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key], True
    loaded = _measured_load(source)
    if capacity > 0:
        while len(_CACHE) >= capacity:
            _CACHE.popitem(last=False)
        _CACHE[key] = loaded
    return loaded, False


def load_streamed(source: ModelSource, hidden_budget: int | None, reason: str) -> LoadedModel:
    """``source.load_streamed()``: the model on the meta device, its weights left on disk (never
    cached: it holds no weights to reuse), measured as a load is."""
    return _measured_load(source, lambda: source.load_streamed(hidden_budget, reason))


def _measured_load(source: ModelSource, load=None) -> LoadedModel:
    """``source.load()`` (or ``load()``), with what it cost kept on the model (``load_memory``): seconds,
    the process's memory before, at its peak (sampled) and after, and the CUDA peak where a GPU is used."""
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    with MemoryTimeline() as timeline:
        with timeline.phase("load"):
            loaded = source.load() if load is None else load()
    samples = [s.rss for s in timeline.samples if s.phase == "load"]
    loaded.load_memory = {
        "seconds": time.perf_counter() - start,
        "rss_before": samples[0],
        "peak_rss": max(samples),
        "rss_after": samples[-1],
        "cuda_peak_allocated": torch.cuda.max_memory_allocated() if cuda else 0,
    }
    return loaded


def load_model(source: ModelSource, capacity: int = 1) -> LoadedModel:
    """Load ``source`` or return it from the cache."""
    return lookup(source, capacity)[0]


def is_cached(source: ModelSource) -> bool:
    """Whether this process holds ``source``'s model already (a sweep's earlier job loaded it)."""
    return source.cache_key() in _CACHE


def clear() -> None:
    _CACHE.clear()


def evict(source: ModelSource) -> None:
    """Forget ``source``'s model (its weights are about to change in place)."""
    _CACHE.pop(source.cache_key(), None)
