"""Per-process model cache: a Hydra multirun runs its jobs in one process, so a sweep over
dataset or analyzer settings loads the base model once. Analyses that change weights work on a
copy (see ``modelxray.quant``), never on the cached model."""

from __future__ import annotations

from collections import OrderedDict

from modelxray.core.subject import LoadedModel
from modelxray.models.base import ModelSource

_CACHE: OrderedDict[str, LoadedModel] = OrderedDict()


def lookup(source: ModelSource, capacity: int = 1) -> tuple[LoadedModel, bool]:
    """``(model, hit)``: ``source`` from the cache (hit) or freshly loaded; keeps at most ``capacity``
    models (0 disables the cache)."""
    key = source.cache_key()
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key], True
    loaded = source.load()
    if capacity > 0:
        while len(_CACHE) >= capacity:
            _CACHE.popitem(last=False)
        _CACHE[key] = loaded
    return loaded, False


def load_model(source: ModelSource, capacity: int = 1) -> LoadedModel:
    """Load ``source`` or return it from the cache."""
    return lookup(source, capacity)[0]


def clear() -> None:
    _CACHE.clear()


def evict(source: ModelSource) -> None:
    """Forget ``source``'s model (its weights are about to change in place)."""
    _CACHE.pop(source.cache_key(), None)
