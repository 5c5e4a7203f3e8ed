"""Turn a composed config into validated component objects, before any model loads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from modelxray.analyzers.base import Analyzer
from modelxray.config.names import check_names
from modelxray.config.settings import GROUPS, RunSettings, run_settings, top_level_keys, unknown_top_level_key
from modelxray.core.errors import ConfigError
from modelxray.core.instantiate import build_component


@dataclass
class Components:
    model: Any  # ModelSource, or None when an in-memory model is given
    dataset: Any
    analyzers: dict[str, Analyzer]
    quant: Any
    tracker: Any
    train: Any = None  # TrainConfig, or None for train=none
    settings: RunSettings = field(default_factory=RunSettings)  # seed, threads, runtime.*, report.*
    reference: Any = None  # a ModelSource to compare with (reference=file|hf|gguf); None: the model before quant=


def validate_config(cfg: DictConfig) -> Components:
    """Every check that needs no model: build (and so validate) every component of ``cfg``."""
    return build_components(cfg)


def build_components(cfg: DictConfig, *, skip_model: bool = False, skip_dataset: bool = False) -> Components:
    if not any(key in cfg for key in ("model", "dataset", "analyzer", "quant", "tracker")):
        raise ConfigError(
            "config",
            "holds none of the keys model, dataset, analyzer, quant, tracker: the primary config file (--config-name) "
            "is empty or not a modelxray config; start it with 'defaults: [config, _self_]' to build on the defaults",
        )
    unknown = sorted(set(cfg.keys()) - top_level_keys())
    if unknown:
        raise unknown_top_level_key(unknown[0])
    check_names(cfg)  # names that become paths or MLflow names: before the model loads, not when the run starts
    settings = run_settings({k: _plain(cfg, k) for k in cfg if k not in ("hydra", *GROUPS)})
    model = None if skip_model else build_component(cfg.model, "model")
    dataset = None if skip_dataset else build_component(cfg.dataset, "dataset")
    train = _train(cfg)
    no_analyzer = not isinstance(cfg.get("analyzer"), DictConfig) or len(cfg.analyzer) == 0
    if no_analyzer and train is None:
        raise ConfigError(
            "analyzer", "no analyzer selected: e.g. analyzer=performance or analyzer=[performance,robustness]"
        )
    analyzers = {}
    for name in [] if no_analyzer else cfg.analyzer:
        obj = build_component(cfg.analyzer[name], f"analyzer.{name}")
        if not isinstance(obj, Analyzer):
            raise ConfigError(f"analyzer.{name}._target_", f"{type(obj).__name__} is not an Analyzer")
        analyzers[name] = obj
    quant = build_component(cfg.quant, "quant")
    _check_quantizing_analyzers(analyzers, quant)
    tracker = build_component(cfg.tracker, "tracker")
    tracker.redactor = _redactor(cfg)
    reference = _reference(cfg)
    return Components(model, dataset, analyzers, quant, tracker, train, settings, reference)


def _redactor(cfg: DictConfig) -> Any:
    """The secrets of this run's config, masked in everything the tracker sends to the store."""
    from modelxray.tracking.redact import Redactor

    try:
        config = OmegaConf.to_container(cfg, resolve=True)
    except Exception:  # noqa: BLE001 - an interpolation that resolves only later: the values as written
        config = OmegaConf.to_container(cfg, resolve=False)
    return Redactor.of_config(config)


def _check_quantizing_analyzers(analyzers: dict, quant: Any) -> None:
    """quant_impact and bitwidth quantize the model themselves from its loaded weights: after
    ``quant=`` their unquantized baseline would be the quantized model."""
    mine = [n for n, a in analyzers.items() if getattr(a, "quantizes_itself", False)]
    applied = getattr(quant, "name", "none")
    if mine and applied != "none":
        raise ConfigError(
            "quant",
            f"analyzer.{mine[0]} quantizes the model itself, against its weights as loaded; after this quant= "
            f"({applied.upper()}) its baseline would already be quantized: run it with quant=none and name what "
            f"to compare in analyzer.{mine[0]}'s keys",
        )


def _reference(cfg: DictConfig) -> Any:
    """The model source of ``reference=file|hf|gguf``, or None for ``reference=none`` (or no key)."""
    from modelxray.models.base import ModelSource
    from modelxray.models.reference import NoReference

    node = cfg.get("reference")
    if node is None:
        return None
    obj = build_component(node, "reference")
    if isinstance(obj, NoReference):
        return None
    if not isinstance(obj, ModelSource):
        raise ConfigError(
            "reference._target_", f"{type(obj).__name__} is not a model source: use reference=file, hf or gguf"
        )
    return obj


def _train(cfg: DictConfig) -> Any:
    """The training config of ``train=<preset>``, or None for ``train=none`` (or no train key)."""
    node = cfg.get("train")
    if node is None:
        return None
    obj = build_component(node, "train")
    return obj if getattr(obj, "enabled", False) else None


def _plain(cfg: DictConfig, key: str) -> Any:
    """``cfg[key]`` resolved, as plain Python values."""
    value = cfg[key]
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig) else value
