"""Instantiate one config node with the checks that need the YAML node itself (unknown keys and
missing mandatory values, reported as one ``ConfigError`` line naming the dotted key), and compose
one option of a config group by name. Hydra and OmegaConf are imported when called, never at import."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omegaconf import DictConfig

from modelxray.core.errors import ConfigError

_HYDRA_KEYS = {"_target_", "_convert_", "_partial_", "_recursive_", "_args_"}


def _target_class(node: DictConfig, key: str) -> type:
    from hydra.utils import get_class

    target = node.get("_target_")
    if not target:
        group, _, option = key.partition(".")
        example = f"{group}={option}" if option else f"{group}=<one of conf/{group}/>"
        raise ConfigError(key, f"is not a chosen option (no _target_): choose it first, e.g. {example}")
    try:
        return get_class(target)
    except Exception as exc:  # noqa: BLE001 - report any import failure as a config error
        raise ConfigError(f"{key}._target_", f"cannot import {target!r}: {exc}") from None


def unknown_key(key: str, cls: type, allowed: set[str]) -> ConfigError:
    """The one line for a key ``cls`` does not take, with the keys it does."""
    valid = ", ".join(sorted(allowed)) or "none (this option takes no keys)"
    return ConfigError(key, f"unknown key for {cls.__name__}; valid keys: {valid}")


def build_component(node: DictConfig, key: str) -> Any:
    """Instantiate one config node (``cfg.dataset``...) after checking its keys.

    Raises ConfigError naming ``key.<field>`` for unknown keys, missing values, wrong types and
    bad values, instead of Hydra's multi-line instantiation traceback.
    """
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate
    from omegaconf import DictConfig, OmegaConf

    if not isinstance(node, DictConfig):
        raise ConfigError(key, f"expected a config mapping, got {node!r}")
    cls = _target_class(node, key)
    from modelxray.core.configurable import Configurable

    if not (isinstance(cls, type) and issubclass(cls, Configurable)):  # a _target_ imports and runs what it names
        raise ConfigError(
            f"{key}._target_",
            f"{node.get('_target_')!r} is not a modelxray component (a Configurable: an analyzer, quantizer, "
            "dataset, model source or tracker); name one of those",
        )
    if dataclasses.is_dataclass(cls):
        allowed = {f.name for f in dataclasses.fields(cls) if f.init}
        unknown = sorted(set(node.keys()) - allowed - _HYDRA_KEYS)
        if unknown:
            raise unknown_key(f"{key}.{unknown[0]}", cls, allowed)
    for name in node.keys():
        if OmegaConf.is_missing(node, name):
            raise ConfigError(f"{key}.{name}", f"is required: set it on the command line, e.g. {key}.{name}=...")
    try:
        # not recursive: a nested ``_target_`` is data for the component (model.architecture of a
        # user's nn.Module, built when the model loads), never built while the config is read
        return instantiate(node, _convert_="all", _recursive_=False)
    except ConfigError as exc:
        raise exc.under(key) from None
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, ConfigError):
            raise cause.under(key) from None
        raise ConfigError(key, f"could not build {cls.__name__}: {cause or exc}") from None


def compose_option(group: str, name: str) -> DictConfig:
    """The config node of ``group=name`` (e.g. ``quant=int4``) as ``python run.py group=name`` composes
    it: defaults lists, the schema and in-group inheritance included. Works inside a running Hydra
    app (a job) and outside one (the Python API, tests)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    from modelxray.core.paths import conf_dir
    from modelxray.core.schema import register_schema

    register_schema()
    options = sorted(p.stem for p in (conf_dir() / group).glob("*.yaml"))
    if name not in options:
        raise ConfigError(name, f"no {group} config of that name; valid: {', '.join(options)}")
    try:
        if GlobalHydra.instance().is_initialized():
            cfg = compose(config_name="config", overrides=[f"{group}={name}"])
        else:
            with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
                cfg = compose(config_name="config", overrides=[f"{group}={name}"])
    except HydraException as exc:
        raise ConfigError(f"{group}={name}", str(exc).splitlines()[0]) from None
    node = cfg[group]
    OmegaConf.resolve(node)
    return node
