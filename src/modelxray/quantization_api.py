"""``get_quantization_analyzer``: the quantization-benchmark workflow of the Python API, as a thin
adapter over ``analyzer=quant_impact`` (so results, files and MLflow logging are the CLI's)::

    from modelxray import get_quantization_analyzer

    analyzer = get_quantization_analyzer(model_name="digits_clip", config={"threads": 1}, results_dir="./results")
    benchmark = analyzer.run_benchmark(strategies=["none", "int8", "int4", "gptq-int4"], priority="balanced")
    for result in benchmark.results:
        print(result.strategy, result.memory_used_gb, result.accuracy, result.inference_time, result.efficiency_score)

``run_benchmark`` runs what ``python run.py model=... analyzer=quant_impact
analyzer.quant_impact.strategies=[...] analyzer.quant_impact.priority=... <config>`` runs, through
``modelxray.analyze``, and wraps the analyzer's per-strategy rows in ``StrategyResult`` objects.
Nothing here measures anything itself: every number is the analyzer's (docs/analyzers/quant_impact.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from modelxray.core.errors import ConfigError

ANALYZER = "quant_impact"
KEY = f"analyzer.{ANALYZER}"
# keys the adapter sets from its own arguments; ``config`` may not set them too (the last would win silently)
OWNED_KEYS = {
    "model": "pass the model as model_name",
    "analyzer": "this runs analyzer=quant_impact; use modelxray.analyze for other analyzers",
    f"{KEY}.strategies": "pass them as run_benchmark(strategies=...)",
    f"{KEY}.priority": "pass it as run_benchmark(priority=...)",
}
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+", re.ASCII)  # owner/name, as the Hugging Face hub spells repositories
PLAIN_VALUE = re.compile(r"[\w.:/@+%*-]+", re.ASCII)  # an override value Hydra reads as written, without quotes
GIB = 2**30  # bytes per GB in every ``*_gb`` field (the analyzer's memory_used_gb is weight_bytes / 2**30)


@dataclass
class StrategyResult:
    """One strategy's row of the analyzer (``result.tables["strategies"]``), field for field.

    The first five fields are the benchmark's summary: ``memory_used_gb`` is the weights' size in the
    packed format (GiB), ``accuracy`` is top-1 test accuracy for a classifier (zero-shot accuracy for
    a CLIP-style model) and next-token top-1 accuracy on the evaluated windows for a language model,
    ``inference_time`` the mean seconds of a timed forward pass, ``efficiency_score`` the score of the
    benchmark's priority. Fields the model kind lacks are None (``perplexity`` on a classifier,
    ``accuracy_ci_*`` and ``examples_per_s`` on a language model)."""

    strategy: str
    memory_used_gb: float
    accuracy: float
    inference_time: float
    efficiency_score: float
    method: str | None = None
    support: str | None = None
    simulated: bool | None = None
    loss: float | None = None
    perplexity: float | None = None
    accuracy_ci_low: float | None = None
    accuracy_ci_high: float | None = None
    examples_scored: float | None = None
    kl: float | None = None
    top1_agree: float | None = None
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    tokens_per_s: float | None = None
    examples_per_s: float | None = None
    weight_bytes: float | None = None
    stored_bytes: float | None = None
    effective_bits: float | None = None
    rss_at_load: float | None = None
    peak_quantize_rss: float | None = None
    rss_after_quantize: float | None = None
    peak_inference_rss: float | None = None
    quantize_seconds: float | None = None
    quality_ratio: float | None = None
    speed_ratio: float | None = None
    memory_ratio: float | None = None
    memory_saved_bytes: float | None = None
    quality_per_gb: float | None = None
    inference_overhead_bytes: float | None = None
    scores: dict[str, float] = field(default_factory=dict)  # priority -> efficiency score, all four
    extra: dict[str, Any] = field(default_factory=dict)  # other columns of the row (CUDA peaks on a GPU)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> StrategyResult:
        named = {f.name for f in fields(cls)} - {"scores", "extra"}
        scores = {k.removeprefix("score_"): v for k, v in row.items() if k.startswith("score_")}
        extra = {k: v for k, v in row.items() if k not in named and not k.startswith("score_")}
        return cls(**{k: v for k, v in row.items() if k in named}, scores=scores, extra=extra)

    @property
    def throughput(self) -> float:
        """Examples/s for a classifier, tokens/s for a language model."""
        return self.examples_per_s if self.examples_per_s is not None else self.tokens_per_s


@dataclass
class SkippedStrategy:
    """A strategy the analyzer could not run on this model or machine, and why."""

    strategy: str
    reason: str


@dataclass
class QuantizationBenchmark:
    """What ``run_benchmark`` returns: the rows, the analyzer's recommendations and where the run went.

    ``recommendations`` are the analyzer's insight sentences (hardware, the strategy to use for the
    priority with its numbers, simulated strategies, quality losses, skipped strategies);
    ``best_by_priority`` is its recommendation per priority (strategy, score, quality, weight MiB)."""

    results: list[StrategyResult]
    recommendations: list[str]
    priority: str
    recommended: str | None  # the strategy with the highest score for ``priority``
    best_by_priority: dict[str, dict[str, Any]]
    unsupported: list[SkippedStrategy]
    task: str  # causal_lm | classification
    quality_metric: str  # perplexity | accuracy | zero-shot accuracy
    hardware: dict[str, Any]
    run_id: str | None  # the MLflow run (None with tracker=none)
    output_dir: Path
    tracking: str
    metrics: dict[str, float] = field(repr=False)  # the run's metrics, as logged (``quant_impact/<s>_<k>``)
    result: Any = field(repr=False)  # the analyzer's ``Result`` (tables, data, texts)

    @classmethod
    def from_outcome(cls, outcome, priority: str) -> QuantizationBenchmark:
        result = _analyzer_result(outcome)
        best = result.data.get("recommendations", {})
        return cls(
            results=[StrategyResult.from_row(r) for r in result.tables.get("strategies", [])],
            recommendations=result.sentences(outcome.results),
            priority=priority,
            recommended=best.get(priority, {}).get("strategy"),
            best_by_priority=best,
            unsupported=[SkippedStrategy(u["strategy"], u["reason"]) for u in result.data.get("unsupported", [])],
            task=result.data.get("task", ""),
            quality_metric=result.data.get("quality_metric", ""),
            hardware=result.data.get("hardware", {}),
            run_id=outcome.run_id,
            output_dir=Path(outcome.output_dir),
            tracking=outcome.tracking,
            metrics=dict(outcome.metrics),
            result=result,
        )


def _analyzer_result(outcome):
    """quant_impact's Result; a failed analyzer raises here instead of returning an empty benchmark."""
    result = outcome.results.get(ANALYZER)
    if result is None:
        raise RuntimeError(f"the run produced no {ANALYZER} result ({outcome.tracking})")
    if not result.ok:
        last = result.error.strip().splitlines()[-1]
        where = Path(outcome.output_dir) / "errors" / f"{ANALYZER}_traceback.txt"
        raise RuntimeError(f"{ANALYZER} failed: {last} (traceback in {where})")
    return result


class QuantizationAnalyzer:
    """A model and its run settings; each ``run_benchmark`` is one modelxray run (one MLflow run)."""

    def __init__(self, model_overrides: list[str], config_overrides: list[str], results_dir: Path | None):
        self.model_overrides = model_overrides
        self.config_overrides = config_overrides
        self.results_dir = results_dir

    def overrides(self, strategies: list[str] | None = None, priority: str = "balanced") -> list[str]:
        """The command line of the run: ``python run.py <these>`` computes and logs the same."""
        chosen = [] if strategies is None else [f"{KEY}.strategies=[{','.join(_strategies(strategies))}]"]
        return [
            *self.model_overrides,
            f"analyzer={ANALYZER}",
            *chosen,
            f"{KEY}.priority={_priority(priority)}",
            *self.config_overrides,
        ]

    def run_benchmark(self, strategies: list[str] | None = None, priority: str = "balanced") -> QuantizationBenchmark:
        """Quantize, measure and score each strategy (None: the analyzer's default list).

        ``results_dir`` is the run's output directory: a second benchmark writes over the first's files
        (its MLflow run is a new one)."""
        from modelxray.api import analyze

        outcome = analyze(self.overrides(strategies, priority), output_dir=self.results_dir)
        return QuantizationBenchmark.from_outcome(outcome, priority)

    def _generate_visualization_data(self, benchmark: QuantizationBenchmark) -> dict[str, Any]:
        """Another name for ``visualization_data``."""
        return visualization_data(benchmark)


def get_quantization_analyzer(
    model_name: str | Path,
    config: Mapping[str, Any] | list[str] | None = None,
    results_dir: str | Path | None = None,
) -> QuantizationAnalyzer:
    """A quantization analyzer for ``model_name``; bad arguments raise ``ConfigError`` before any work.

    ``model_name``: a ``conf/model`` config (``digits_clip``, ``tiny_gpt2``, ``smollm2``...), a
    local directory or hub id (``model=hf``; an image model needs ``config={"dataset": "digits"}``
    or another image dataset), or a model file (``model=file``). ``config``: extra overrides, as a
    dict or DictConfig (nested keys become dotted keys) or a list of override strings.
    ``results_dir``: the output directory (None: ``outputs/api/<date>/<time>``)."""
    results = Path(results_dir).expanduser() if results_dir is not None else None
    return QuantizationAnalyzer(model_overrides(model_name), config_overrides(config), results)


def model_overrides(model_name: str | Path) -> list[str]:
    """The ``model=...`` overrides that load ``model_name``."""
    name = str(model_name)
    configs = _model_configs()
    if name in configs:
        return [f"model={name}"]
    path = Path(name).expanduser()
    if path.is_dir():
        return ["model=hf", f"model.name_or_path={override_value(str(path.resolve()))}"]
    if path.is_file():
        return ["model=file", f"model.path={override_value(str(path.resolve()))}"]
    if HUB_ID.fullmatch(name):
        return ["model=hf", f"model.name_or_path={name}"]
    raise ConfigError(
        "model_name",
        f"{name!r} is not a model config ({', '.join(configs)}), an existing model file or directory, "
        "or a Hugging Face hub id 'owner/name'",
    )


def _model_configs() -> list[str]:
    from modelxray.core.paths import conf_dir

    return sorted(p.stem for p in (conf_dir() / "model").glob("*.yaml"))


def config_overrides(config: Mapping[str, Any] | list[str] | None) -> list[str]:
    """``config`` as override strings, refusing the keys the adapter sets from its own arguments."""
    from omegaconf import DictConfig, OmegaConf

    if config is None:
        return []
    if isinstance(config, DictConfig):  # plain containers: its lists must not stay ListConfig
        config = OmegaConf.to_container(config, resolve=False)
    if isinstance(config, Mapping):
        overrides = [f"{k}={override_value(v)}" for k, v in _dotted(config)]
    elif isinstance(config, (list, tuple)) and all(isinstance(o, str) for o in config):
        overrides = list(config)
    else:
        raise ConfigError(
            "config", f"must be None, a dict of dotted keys or a list of override strings, got {type(config).__name__}"
        )
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if key in OWNED_KEYS:
            raise ConfigError("config", f"sets {key!r}: {OWNED_KEYS[key]}")
    return overrides


def _dotted(node: Mapping[str, Any], prefix: str = ""):
    """(dotted key, value) pairs of a nested mapping; an empty mapping stays a value."""
    for k, v in node.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping) and v:
            yield from _dotted(v, key)
        else:
            yield key, v


def override_value(v: Any) -> str:
    """A Python value in Hydra's override grammar (strings quoted only where Hydra would misread them)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(override_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ",".join(f"{k}:{override_value(x)}" for k, x in v.items()) + "}"
    s = str(v)
    return s if PLAIN_VALUE.fullmatch(s) else "'" + s.replace("'", "\\'") + "'"


def _strategies(strategies: list[str]) -> list[str]:
    """The names as given (the analyzer accepts ``gptq-int4``), each checked against ``conf/quant``."""
    from modelxray.analyzers.quant_impact.config import load_strategy

    if isinstance(strategies, str) or not strategies:
        raise ConfigError(
            "strategies", f"must be a non-empty list of conf/quant names, e.g. ['none', 'int8'], got {strategies!r}"
        )
    for s in strategies:
        load_strategy(s)  # ConfigError("strategies", "unknown strategy ...; valid: ...")
    return [str(s) for s in strategies]


def _priority(priority: str) -> str:
    from modelxray.analyzers.quant_impact.config import PRIORITIES

    if priority not in PRIORITIES:
        raise ConfigError("priority", f"unknown priority {priority!r}; use one of {', '.join(PRIORITIES)}")
    return priority


def visualization_data(benchmark: QuantizationBenchmark) -> dict[str, Any]:
    """The data behind the benchmark's charts, from the analyzer's tables (memory in GB = GiB, as memory_used_gb).

    ``memory_timeline``: per strategy, process RSS sampled while it was quantized and run (seconds since
    its own start, phases load / quantize / inference); ``memory_usage``: weights, stored and peak
    memory; ``speed_accuracy``: time, throughput and accuracy pairs; ``normalized_comparison`` (and
    ``radar_chart``): the radar plot's axes, each divided by the best strategy's value (1 = best);
    ``efficiency_scores``: the score of every priority."""
    from modelxray.analyzers.quant_impact.plots import AXES, radar_values

    rows = benchmark.result.tables.get("strategies", [])
    normalized = radar_values(rows) if rows else None
    axes = [k for k, _ in AXES]
    return {
        "memory_timeline": _timeline(benchmark.result.tables.get("memory_timeline", [])),
        "memory_usage": {r.strategy: _memory(r) for r in benchmark.results},
        "speed_accuracy": {r.strategy: _speed_accuracy(r) for r in benchmark.results},
        "normalized_comparison": {} if normalized is None else normalized.to_dict(orient="index"),
        "radar_chart": {
            "axes": axes,
            "values": {} if normalized is None else {s: row[axes].tolist() for s, row in normalized.iterrows()},
        },
        "efficiency_scores": {r.strategy: dict(r.scores) for r in benchmark.results},
    }


def _timeline(samples: list[dict]) -> dict[str, dict[str, list]]:
    """Each strategy's samples in time order (two threads append them, so the table's order can be
    off by a sample; the timeline plot sorts them the same way)."""
    by_strategy: dict[str, list[dict]] = {}
    for s in samples:
        by_strategy.setdefault(s["strategy"], []).append(s)
    return {name: _series(sorted(rows, key=lambda s: s["t_s"])) for name, rows in by_strategy.items()}


def _series(samples: list[dict]) -> dict[str, list]:
    return {
        "timestamps": [s["t_s"] for s in samples],
        "memory_values": [s["rss_bytes"] / GIB for s in samples],
        "phases": [s["phase"] for s in samples],
        "cuda_memory_values": [s["cuda_allocated_bytes"] / GIB for s in samples],  # 0 without a GPU
    }


def _memory(r: StrategyResult) -> dict[str, float]:
    return {
        "weights_gb": r.memory_used_gb,
        "stored_gb": r.stored_bytes / GIB,
        "saved_gb": r.memory_saved_bytes / GIB,
        "peak_quantize_rss_gb": r.peak_quantize_rss / GIB,
        "peak_inference_rss_gb": r.peak_inference_rss / GIB,
        "inference_overhead_gb": r.inference_overhead_bytes / GIB,
    }


def _speed_accuracy(r: StrategyResult) -> dict[str, float]:
    return {
        "inference_time": r.inference_time,
        "throughput": r.throughput,
        "accuracy": r.accuracy,
        "quality_ratio": r.quality_ratio,
    }
