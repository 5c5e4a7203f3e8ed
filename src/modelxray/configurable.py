"""Config dataclasses that check themselves when Hydra instantiates them.

Every component (model source, dataset, analyzer, quantizer, tracker) is a dataclass whose fields
are its YAML keys. ``hydra.utils.instantiate`` builds it cheaply, and ``__post_init__`` checks the
types and values, so a bad config fails in one clear line before any model loads
(optimum-benchmark validates its configs the same way). ``build_component`` adds the checks that
need the YAML node itself: unknown keys and missing mandatory values.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, Union

from omegaconf import DictConfig, OmegaConf

from modelxray.errors import ConfigError

_HYDRA_KEYS = {"_target_", "_convert_", "_partial_", "_recursive_", "_args_"}


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


def _target_class(node: DictConfig, key: str) -> type:
    from hydra.utils import get_class

    target = node.get("_target_")
    if not target:
        raise ConfigError(key, "has no _target_: pick a config from its group (e.g. model=tiny_gpt2)")
    try:
        return get_class(target)
    except Exception as exc:  # noqa: BLE001 - report any import failure as a config error
        raise ConfigError(f"{key}._target_", f"cannot import {target!r}: {exc}") from None


def build_component(node: DictConfig, key: str) -> Any:
    """Instantiate one config node (``cfg.dataset``...) after checking its keys.

    Raises ConfigError naming ``key.<field>`` for unknown keys, missing values, wrong types and
    bad values, instead of Hydra's multi-line instantiation traceback.
    """
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    if not isinstance(node, DictConfig):
        raise ConfigError(key, f"expected a config mapping, got {node!r}")
    cls = _target_class(node, key)
    if dataclasses.is_dataclass(cls):
        allowed = {f.name for f in dataclasses.fields(cls) if f.init}
        unknown = sorted(set(node.keys()) - allowed - _HYDRA_KEYS)
        if unknown:
            raise ConfigError(
                f"{key}.{unknown[0]}",
                f"unknown key for {cls.__name__}; valid keys: {', '.join(sorted(allowed))}",
            )
    for name in node.keys():
        if OmegaConf.is_missing(node, name):
            raise ConfigError(f"{key}.{name}", f"is required: set it on the command line, e.g. {key}.{name}=...")
    try:
        return instantiate(node, _convert_="all")
    except ConfigError as exc:
        raise exc.under(key) from None
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, ConfigError):
            raise cause.under(key) from None
        raise ConfigError(key, f"could not build {cls.__name__}: {cause or exc}") from None
