"""Per-process model cache: a Hydra multirun runs its jobs in one process, so a sweep over
dataset or analyzer settings loads the base model once. Analyses that change weights work on a
copy (see ``modelxray.quant``), never on the cached model."""

from __future__ import annotations

from collections import OrderedDict

from modelxray.models.base import LoadedModel, ModelSource

_CACHE: OrderedDict[str, LoadedModel] = OrderedDict()
load_count = 0  # how many real loads this process did (tests and benchmarks read it)


def load_model(source: ModelSource, capacity: int = 1) -> LoadedModel:
    """Load ``source`` or return it from the cache; keep at most ``capacity`` models (0 disables)."""
    global load_count
    key = source.cache_key()
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    loaded = source.load()
    load_count += 1
    if capacity > 0:
        while len(_CACHE) >= capacity:
            _CACHE.popitem(last=False)
        _CACHE[key] = loaded
    return loaded


def clear() -> None:
    _CACHE.clear()
