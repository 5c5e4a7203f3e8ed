"""Instantiate one config node with the checks that need the YAML node itself: unknown keys and
missing mandatory values, reported as one ``ConfigError`` line naming the dotted key."""

from __future__ import annotations

import dataclasses
from typing import Any

from omegaconf import DictConfig, OmegaConf

from modelxray.core.errors import ConfigError

_HYDRA_KEYS = {"_target_", "_convert_", "_partial_", "_recursive_", "_args_"}


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
