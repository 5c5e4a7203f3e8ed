"""The top-level keys of a run (``seed``, ``threads``, ``progress``, ``model_cache_size``,
``runtime.*``, ``report.*``): one schema, checked like every group's options. It is registered as
``schema/settings`` and ``conf/config.yaml`` starts from it, so these dataclasses hold the only
defaults and ``docs/config_reference.md`` lists every key with its help."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from modelxray.core.configurable import Configurable
from modelxray.core.errors import ConfigError

HEADLINE = (  # each entry: the first of its alternatives (a|b) the run logged
    "performance/perplexity|performance/accuracy|performance/chrf|performance/wer|performance/exact_match"
    "|performance/map|performance/miou|performance/knn_accuracy|performance/output_rel_error",  # quality
    "performance/top1_agree|performance/pixel_agree|performance/embedding_drift",  # agreement with the reference
    "performance/kl|performance/ppl_ratio|performance/delta_loss",  # how far the outputs moved
    "model/size_bytes",  # the stored weights
)
ORIGINAL_WEIGHTS_PLACES = ("auto", "disk", "memory", "cpu")  # where changed weights wait (core.original_weights)
OFFLOAD_MODES = ("auto", "none", "blocks")  # runtime.offload
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS.update({"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40})


def parse_bytes(value: Any, key: str) -> int:
    """``8GB``, ``512MiB``, ``1.5e9`` or a plain number of bytes, as bytes; one line naming ``key`` otherwise."""
    import re

    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmgt]i?b|b)?\s*", str(value), re.I)
    if match is None or float(match.group(1)) <= 0:
        raise ConfigError(key, f"expected a positive size such as 8GB, 512MiB or a number of bytes, got {value!r}")
    return int(float(match.group(1)) * _UNITS[(match.group(2) or "").lower()])


@dataclass
class RuntimeSettings(Configurable):
    """Where a run starts and what it keeps: resuming, skipping finished configs, original weights."""

    skip_finished: bool = False  # skip configs that FINISHED in this experiment; resume those that stopped part-way
    resume: str | None = None  # an MLflow run id: continue that run, keeping the analyzers it finished
    original_weights: str = "auto"  # changed weights' originals: disk, memory, cpu, auto (cpu on a GPU, else disk)
    reference_cache_dir: str | None = "~/.cache/modelxray/references"  # reference outputs by content; null = none kept
    offload: str = "auto"  # none: the whole model in memory; blocks: read from disk one block at a time; auto: blocks when the weights exceed max_memory
    max_memory: str | None = (
        None  # memory the run may use (8GB, 512MiB, bytes); null = what is available now, less memory_headroom
    )
    memory_headroom: float = (
        0.25  # share of the available memory max_memory leaves free by default (data, activations, the OS)
    )

    def validate(self) -> None:
        self.require_choice("original_weights", ORIGINAL_WEIGHTS_PLACES)
        self.require_choice("offload", OFFLOAD_MODES)
        if not 0.0 <= self.memory_headroom < 1.0:
            raise ConfigError("memory_headroom", f"must lie in [0, 1), got {self.memory_headroom}")
        if self.max_memory is not None:
            parse_bytes(self.max_memory, "max_memory")
        if self.resume is not None and not self.resume.strip():
            raise ConfigError("resume", f"expected an MLflow run id, got {self.resume!r}")


@dataclass
class ReportSettings(Configurable):
    """What the report directory holds beside each analyzer's files."""

    dashboard: bool = True  # plots/analysis_summary_dashboard.png: every analyzer's headline figures on one page
    headline: list[str] = field(
        default_factory=lambda: list(HEADLINE)
    )  # the run's MLflow description and _headline/* metrics: per entry, the first of its alternatives (a|b) the run logged

    def validate(self) -> None:
        if not self.headline:
            raise ConfigError("headline", "is empty: list metric keys such as performance/perplexity")


@dataclass
class RunSettings(Configurable):
    """Keys of the run itself, beside the groups (model, dataset, analyzer, quant, train, tracker)."""

    seed: int = 0  # python, numpy and torch RNGs
    threads: int | None = (
        None  # torch intra-op threads; null = the CPUs this process may use (affinity, cgroup quota), at most the physical cores, less those other processes keep busy as it starts
    )
    progress: bool = True  # progress bars
    model_cache_size: int = 1  # models kept loaded per process (a multirun reuses them); 0 disables
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    report: ReportSettings = field(default_factory=ReportSettings)

    def validate(self) -> None:
        self.require_positive("threads", allow_none=True)
        self.require_non_negative("model_cache_size")


GROUPS = ("model", "dataset", "analyzer", "quant", "reference", "train", "tracker")  # the config groups of a run


def top_level_keys() -> set[str]:
    """Every key a run's config may hold at its top level."""
    return {*GROUPS, *(f.name for f in dataclasses.fields(RunSettings)), "hydra"}


def unknown_top_level_key(key: str) -> ConfigError:
    """The one line for a top-level key a run's config does not take, with the keys it does."""
    return ConfigError(key, f"unknown top-level key; valid keys: {', '.join(sorted(top_level_keys() - {'hydra'}))}")


def run_settings(config: dict[str, Any]) -> RunSettings:
    """The run's settings from its composed config (a plain mapping); a bad or unknown key raises
    ``ConfigError`` naming it (``runtime.resume``, ``report.dashbord``)."""
    return _build(RunSettings, {k: v for k, v in config.items() if k not in (*GROUPS, "hydra")}, "")


def _build(cls: type, values: Any, prefix: str) -> Any:
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise ConfigError(prefix.rstrip("."), f"expected a mapping of {cls.__name__} keys, got {values!r}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        where = f"{prefix}{unknown[0]}"
        raise ConfigError(where, f"unknown key; valid keys: {', '.join(f'{prefix}{k}' for k in fields)}")
    kwargs = {}
    for name, value in values.items():
        default = fields[name].default_factory
        nested = default() if default is not dataclasses.MISSING else None
        is_settings = isinstance(nested, Configurable)
        kwargs[name] = _build(type(nested), value, f"{prefix}{name}.") if is_settings else value
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise exc.under(prefix.rstrip(".")) from None
