"""The ``ModelAnalysisManager`` names of the dynamics monitor, for code written against them.

Why this module exists: training loops written for the Model Analysis Framework API
(``ModelAnalysisManager.create(AnalysisConfig(interval=100, param_change_enabled=True))``,
``analyzer.on_optimizer_step(model, inputs=batch)``, ``MetricComputer`` subclasses with
``compute(self, **kwargs)``) run on modelxray with only their import line changed. Nothing here
measures anything: every name is the monitor, its config or one of its types, so the numbers are
the same as ``DynamicsMonitor``'s and ``train=finetune_lm``'s.

* ``ModelAnalysisManager`` is ``DynamicsMonitor``; without a config it uses ``AnalysisConfig()``.
* ``AnalysisConfig`` is ``DynamicsConfig`` that also takes the flat keys below and reads them back
  as attributes (``config.param_change_enabled``). Each flat key is one nested key; a flat key the
  call leaves out gets the default in the table (not ``DynamicsConfig``'s) unless the nested key is
  given; every key without a flat name keeps ``DynamicsConfig``'s default. A flat key given together
  with a nested key of another value fails with one ``ConfigError`` naming both.
* ``MetricComputer``, ``ParameterDelta``, ``ParameterChangeMetrics``, ``SparseQualityMetrics`` are
  modelxray's own names; ``ParameterSnapshot`` is ``Snapshot`` and ``AnalysisContext`` is
  ``MetricContext``.

Flat key -> nested key (default of the flat key):

    snapshot_device                 -> snapshot_device             ("cpu"; "cuda" where a GPU is present)
    param_change_enabled            -> param_change.enabled        (True)
    param_change_thresholds         -> param_change.thresholds     ([1e-8, 1e-6, 1e-4])
    param_change_per_layer          -> param_change.per_layer      (False)
    param_change_track_components   -> param_change.per_component  (False)
    sparse_quality_enabled          -> sparse.enabled              (True)
    sparse_quality_thresholds       -> sparse.thresholds           ([1e-8, 1e-6, 1e-4])
    sparse_quality_include_random   -> sparse.random_baseline      (True)
    gradient_enabled                -> grad.enabled                (False)
    momentum_enabled                -> optim.enabled               (False: Adam moment statistics)
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, NamedTuple

from modelxray.core.errors import ConfigError
from modelxray.training_dynamics.base import MetricContext
from modelxray.training_dynamics.config import _SECTIONS, DynamicsConfig
from modelxray.training_dynamics.monitor import DynamicsMonitor
from modelxray.training_dynamics.snapshot import Snapshot


class FlatKey(NamedTuple):
    section: str  # a section of DynamicsConfig
    field: str  # its key in that section
    default: Any  # the flat key's default when neither it nor the nested key is given


FLAT_KEYS: dict[str, FlatKey] = {
    "param_change_enabled": FlatKey("param_change", "enabled", True),
    "param_change_thresholds": FlatKey("param_change", "thresholds", [1e-8, 1e-6, 1e-4]),
    "param_change_per_layer": FlatKey("param_change", "per_layer", False),
    "param_change_track_components": FlatKey("param_change", "per_component", False),
    "sparse_quality_enabled": FlatKey("sparse", "enabled", True),
    "sparse_quality_thresholds": FlatKey("sparse", "thresholds", [1e-8, 1e-6, 1e-4]),
    "sparse_quality_include_random": FlatKey("sparse", "random_baseline", True),
    "gradient_enabled": FlatKey("grad", "enabled", False),
    "momentum_enabled": FlatKey("optim", "enabled", False),
}


def _same(a: Any, b: Any) -> bool:
    """Equal values, a list and a tuple of the same items included."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    return a == b


def _explicit(value: Any, cls: type) -> dict[str, Any] | None:
    """The nested keys a section value gives: a dict's keys, or every key of a section instance;
    None for something that is neither (``DynamicsConfig`` then reports it)."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, cls):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(cls)}
    return None


def merge_section(name: str, value: Any, flat: dict[str, Any]) -> Any:
    """One section of ``DynamicsConfig`` from its nested value and the flat keys given: the nested
    keys, then the flat keys, then the flat keys' defaults where neither says anything."""
    explicit = _explicit(value, _SECTIONS[name])
    if explicit is None:
        return value
    merged = dict(explicit)
    for key, (section, field, default) in FLAT_KEYS.items():
        if section != name:
            continue
        if key in flat:
            if field in explicit and not _same(explicit[field], flat[key]):
                raise ConfigError(
                    key,
                    f"{flat[key]!r} contradicts {name}.{field}={explicit[field]!r}; give only one of the two",
                )
            merged[field] = flat[key]
        elif field not in explicit:
            merged[field] = copy.copy(default)
    return value if isinstance(value, _SECTIONS[name]) else merged


def _under_flat_name(exc: ConfigError, flat: dict[str, Any]) -> ConfigError:
    """A bad value given by a flat key is reported under that key, as the caller wrote it."""
    for key, (section, field, _) in FLAT_KEYS.items():
        if key in flat and exc.key == f"{section}.{field}":
            return ConfigError(key, exc.message)
    return exc


def _flat_property(key: str) -> property:
    section, field, _ = FLAT_KEYS[key]

    def get(self) -> Any:
        return getattr(getattr(self, section), field)

    def set_(self, value: Any) -> None:
        setattr(getattr(self, section), field, value)

    return property(get, set_, doc=f"``{section}.{field}``")


class AnalysisConfig(DynamicsConfig):
    """``DynamicsConfig`` with the flat keys of the module docstring; presets ``minimal()`` and
    ``comprehensive()`` as there. ``None`` for a flat key means not given."""

    def __init__(
        self,
        interval: int = 100,
        snapshot_device: str = "cpu",
        snapshot_dtype: str = "float32",
        param_change_enabled: bool | None = None,
        param_change_thresholds: list[float] | None = None,
        param_change_per_layer: bool | None = None,
        param_change_track_components: bool | None = None,
        sparse_quality_enabled: bool | None = None,
        sparse_quality_thresholds: list[float] | None = None,
        sparse_quality_include_random: bool | None = None,
        gradient_enabled: bool | None = None,
        momentum_enabled: bool | None = None,
        *,
        param_change: Any = None,
        sparse: Any = None,
        grad: Any = None,
        optim: Any = None,
        activations: Any = None,
        sharpness: Any = None,
    ):
        flat = {k: v for k, v in locals().items() if k in FLAT_KEYS and v is not None}
        nested = {"param_change": param_change, "sparse": sparse, "grad": grad, "optim": optim}
        sections = {name: merge_section(name, value, flat) for name, value in nested.items()}
        try:
            super().__init__(
                interval=interval,
                snapshot_dtype=snapshot_dtype,
                snapshot_device=snapshot_device,
                activations=activations,
                sharpness=sharpness,
                **sections,
            )
        except ConfigError as exc:
            raise _under_flat_name(exc, flat) from None


for _key in FLAT_KEYS:
    setattr(AnalysisConfig, _key, _flat_property(_key))
del _key


class ModelAnalysisManager(DynamicsMonitor):
    """``DynamicsMonitor``; ``ModelAnalysisManager()`` and ``.create()`` without a config use
    ``AnalysisConfig()``. ``.create(config)`` adds the computers the config enables,
    ``ModelAnalysisManager(config)`` none (add them with ``.add_metric``)."""

    def __init__(self, config: DynamicsConfig | None = None, probe: Any = None):
        super().__init__(config if config is not None else AnalysisConfig(), probe)


ParameterSnapshot = Snapshot
AnalysisContext = MetricContext
