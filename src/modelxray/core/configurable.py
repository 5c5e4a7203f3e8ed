"""Config dataclasses that check themselves when Hydra instantiates them.

Every component (model source, dataset, analyzer, quantizer, tracker) is a dataclass whose fields
are its YAML keys and whose defaults are the only defaults. ``hydra.utils.instantiate`` builds it
cheaply, and ``__post_init__`` checks the types and values, so a bad config fails in one clear line
before any model loads (optimum-benchmark validates its configs the same way). This module is pure
Python: no Hydra, no OmegaConf, no torch.
"""

from __future__ import annotations

import dataclasses
import importlib
import types
import typing
from types import ModuleType
from typing import Any, Literal, Union

from modelxray.core.errors import ConfigError


@dataclasses.dataclass
class Configurable:
    """Base of every config dataclass: type-checks its fields, then runs ``validate``."""

    def __post_init__(self) -> None:
        check_field_types(self)
        self.validate()

    def validate(self) -> None:
        """Value checks of the subclass (ranges, files, packages). Raise ``ConfigError(field, why)``."""

    # small helpers for validate()
    def require_positive(self, *names: str, allow_none: bool = False) -> None:
        for name in names:
            value = getattr(self, name)
            if value is None and allow_none:
                continue
            values = value if isinstance(value, (list, tuple)) else [value]
            for v in values:
                if v is None or v <= 0:
                    raise ConfigError(name, f"must be positive, got {value!r}")

    def require_non_negative(self, *names: str) -> None:
        for name in names:
            value = getattr(self, name)
            values = value if isinstance(value, (list, tuple)) else [value]
            for v in values:
                if v is not None and v < 0:
                    raise ConfigError(name, f"must be >= 0, got {value!r}")

    def require_choice(self, name: str, choices: typing.Iterable[str]) -> None:
        value = getattr(self, name)
        choices = list(choices)
        if value not in choices:
            raise ConfigError(name, f"must be one of {', '.join(map(str, choices))}; got {value!r}")


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        args = typing.get_args(tp)
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return "mapping"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def value_matches(value: Any, tp: Any) -> bool:
    """Whether ``value`` fits the annotation ``tp`` (the subset of typing our configs use)."""
    if tp is Any:
        return True
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return any(value_matches(value, a) for a in typing.get_args(tp))
    if origin is Literal:
        return value in typing.get_args(tp)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False
        args = typing.get_args(tp)
        return not args or all(value_matches(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True


def check_field_types(obj: Any) -> None:
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        if not f.init:
            continue
        value = getattr(obj, f.name)
        tp = hints.get(f.name, Any)
        if not value_matches(value, tp):
            raise ConfigError(f.name, f"expected {_type_name(tp)}, got {value!r}")


def implementation(module: str) -> ModuleType:
    """The module that does a config's work, imported when the work runs: a config names its
    implementation (as it names its plots module) and never imports it, so the implementation can
    read the config and modules point one way; the import also stays off start-up."""
    return importlib.import_module(module)
