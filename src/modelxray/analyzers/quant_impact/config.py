"""Quantization-impact analyzer: for each strategy, what it costs and saves on this hardware.

For every strategy (a ``conf/quant`` config name) it applies the quantizer to a fresh copy of the
model while sampling memory (load / quantize / inference phases), then measures quality against
the unquantized model, latency and throughput, and derives savings, quality per GB and an
efficiency score weighted by the configured priority. Simulated strategies (RTN, GPTQ, AWQ) give
exact quality but float32 memory and speed; real kernels (casts, torchao int8) give all three.
The report says which is which.

On a classifier (``task: classification``) quality is measured on the first ``eval_examples`` test
examples (accuracy, loss, top-1 agreement and KL against the unquantized model's predictions) and
speed in examples/s; calibration-based strategies (GPTQ, AWQ) calibrate on training images and
need repeated blocks (a ViT, a CLIP tower): on a model without them they are listed as unable to
run, with the reason, instead of failing the analyzer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from modelxray.analyzers.base import Analyzer
from modelxray.core.errors import ConfigError, MissingLibrary
from modelxray.core.result import Result
from modelxray.kinds.causal_lm import CausalLM
from modelxray.kinds.classifier import Classifier
from modelxray.kinds.labelled_images import LabelledImagesKind
from modelxray.kinds.speech_ctc import SpeechCTC
from modelxray.kinds.table import kind_of
from modelxray.kinds.windows import WindowsKind

# the strategies table of summary_report.md: quality, agreement, speed, size and the score
SUMMARY_COLUMNS = (
    "strategy",
    "method",
    "simulated",
    "perplexity",
    "delta_loss",
    "delta_loss_se",
    "accuracy",
    "accuracy_ci_low",
    "accuracy_ci_high",
    "task_score",
    "task_score_se",
    "top1_agree",
    "kl",
    "latency_p50_ms",
    "tokens_per_s",
    "examples_per_s",
    "effective_bits",
    "weight_bytes",
    "peak_inference_rss",
    "efficiency_score",
)
SPEED_COLUMNS = ("latency_p50_ms", "tokens_per_s", "examples_per_s")


def _shown_row(row: dict) -> dict:
    """A strategy's summary row; a simulated one (fake-quantized weights in float layers) shows no
    speed of its own: "not measured (simulated)"."""
    shown = {k: row[k] for k in SUMMARY_COLUMNS if k in row}
    if row.get("latency_p50_ms") != row.get("latency_p50_ms"):  # NaN: a model streamed from disk is not timed
        shown.update({k: "not measured (streamed)" for k in SPEED_COLUMNS if k in shown})
    elif row.get("simulated") and row.get("strategy") != "none":
        shown.update({k: "not measured (simulated)" for k in SPEED_COLUMNS if k in shown})
    return shown


PRIORITIES = {  # weights of (quality, speed, memory) in the efficiency score
    "accuracy": (0.6, 0.2, 0.2),
    "speed": (0.2, 0.6, 0.2),
    "memory": (0.2, 0.2, 0.6),
    "balanced": (1 / 3, 1 / 3, 1 / 3),
}


def strategy_name(name: str) -> str:
    """The ``conf/quant`` option a strategy names: ``gptq-int4`` is ``gptq_int4`` unless a config is
    named with the hyphen itself."""
    from modelxray.core.instantiate import compose_option

    name = str(name)
    if "-" not in name:
        return name
    try:
        compose_option("quant", name)
        return name
    except ConfigError:
        return name.replace("-", "_")


def load_strategy(name: str):
    """The quantizer of ``quant=<name>``, composed as the command line would compose it."""
    from modelxray.core.instantiate import build_component, compose_option

    name = strategy_name(name)
    try:
        node = compose_option("quant", name)
    except ConfigError as exc:
        raise ConfigError("strategies", f"unknown strategy {name!r}: {exc.message}") from None
    return build_component(node, f"quant[{name}]")


@dataclass
class QuantImpactAnalyzer(Analyzer):
    name: ClassVar[str] = "quant_impact"
    quantizes_itself: ClassVar[bool] = True
    # streamed from disk: the strategies that quantize block by block share one read; speed is not measured
    streams_blocks: ClassVar[bool] = True
    plots_module: ClassVar[str] = "modelxray.analyzers.quant_impact.plots"
    run_module: ClassVar[str] = "modelxray.analyzers.quant_impact.run"
    insights_module: ClassVar[str] = "modelxray.analyzers.quant_impact.insights"
    model_kinds: ClassVar[tuple[type, ...]] = (CausalLM, Classifier, WindowsKind, LabelledImagesKind)
    strategies: list[str] = field(default_factory=lambda: ["none", "int8", "int4", "gptq_int4", "awq_int4"])
    priority: str = "balanced"  # accuracy | speed | memory | balanced: weights of the efficiency score
    max_memory_gb: float | None = (
        None  # recommend only strategies whose weights fit this many GB (2^30 bytes); null: no limit
    )
    max_latency_ms: float | None = (
        None  # recommend only strategies whose median latency (speed_batch_size) is at most this; null: no limit
    )
    eval_windows: int = 8  # windows of the dataset for quality per strategy
    kl_windows: int = 4  # windows whose reference distribution is kept for exact KL
    batch_size: int = 4  # windows per forward pass while evaluating
    speed_batch_size: int = 1  # sequences (classifier: test examples) per timed forward pass
    eval_examples: int = 512  # classifier: test examples for quality per strategy
    eval_batch_size: int = 64  # classifier: test examples per forward pass while evaluating
    knn_k: int = 5  # vision backbone: neighbours voting in the k-NN accuracy of its embeddings
    warmup: int = 1  # untimed forward passes before timing a strategy
    iters: int = 10  # at most this many timed forward passes per strategy
    min_iters: int = 3  # at least this many; then timing stops once the estimate is precise enough:
    precision: float = 0.05  # ... the 95% interval of the mean latency within +-5% of it,
    timing_budget_s: float = 2.0  # ... or this many seconds of timed passes per strategy
    memory_interval_ms: float = 50.0  # memory sampling period of the timeline
    agreement_floor: float = 0.9  # never recommend a strategy whose top-1 agreement with the baseline is below this
    kl_ceiling: float = 0.25  # ... or whose KL (nats) from it is above this, where measured
    fragmentation_share: float = 0.25  # GPU: name a strategy after which this share of reserved memory sits unallocated
    # language models: rank by an lm-eval task's metric instead of perplexity, <task>/<metric> such as
    # pydoc_topic_mc/acc (each strategy runs the task, in memory); null: perplexity
    rank_by_task: str | None = None
    task_limit: float | None = None  # rank_by_task: documents of the task per strategy (a count or a share); null: all

    def validate(self) -> None:
        self.require_choice("priority", PRIORITIES)
        self.require_positive(
            "eval_windows",
            "kl_windows",
            "batch_size",
            "speed_batch_size",
            "eval_examples",
            "eval_batch_size",
            "iters",
            "min_iters",
            "precision",
            "timing_budget_s",
            "memory_interval_ms",
        )
        self.require_non_negative("warmup")
        self.require_non_negative("kl_ceiling")
        if not 0 <= self.agreement_floor <= 1:
            raise ConfigError("agreement_floor", f"must be a share in [0, 1], got {self.agreement_floor}")
        if not 0 < self.fragmentation_share < 1:
            raise ConfigError("fragmentation_share", f"must be a share in (0, 1), got {self.fragmentation_share}")
        self.require_positive("max_memory_gb", "max_latency_ms", "task_limit", allow_none=True)
        if not self.strategies:
            raise ConfigError("strategies", "is empty: list conf/quant config names, e.g. [none, int8, int4]")
        for s in self.strategies:
            try:
                load_strategy(s)  # unknown names and bad configs fail before any model loads
            except MissingLibrary:
                pass  # listed as skipped, with the install line, when the strategies run
        self.ranking()  # the task known, its documents readable

    def ranking(self):
        """The lm-eval task metric the strategies are ranked by (``rank_by_task``), or None."""
        from modelxray.analyzers.lm_eval.ranking import task_ranking

        return task_ranking(self.rank_by_task, self.task_limit, self.batch_size)

    def stream_refusal(self, quant=None) -> tuple[str, str, str] | None:
        if self.rank_by_task is not None:
            return (
                "analyzer.quant_impact.rank_by_task",
                "lm-eval runs each strategy's whole model in memory, which a model streamed from disk never is",
                "set rank_by_task=null (perplexity ranks them), or use runtime.offload=none",
            )
        timed = [k for k, v in (("max_latency_ms", self.max_latency_ms), ("priority", self.priority == "speed")) if v]
        if timed:
            return (
                f"analyzer.quant_impact.{timed[0]}",
                "a model streamed from disk is not timed (a forward's time is the disk's), so no strategy has a "
                "latency to budget or a speed to rank by",
                "drop max_latency_ms and priority=speed, or use runtime.offload=none",
            )
        return None

    def reference_windows(self) -> tuple[int | None, int, int]:
        return self.eval_windows, self.batch_size, self.kl_windows

    def preflight(self, subject) -> None:
        kind = kind_of(subject)
        if isinstance(kind, LabelledImagesKind):
            return  # its images come with the run (its kind builds them)
        if isinstance(kind, Classifier):
            from modelxray.data.base import ClassificationData

            if not isinstance(subject.data, ClassificationData) or subject.data.n_samples == 0:
                raise ConfigError(
                    "analyzer.quant_impact", "needs the test split of a classification dataset for a classifier"
                )
            return
        if isinstance(kind, SpeechCTC):
            kind.refuse_position_scoring("analyzer.quant_impact", subject.info.name)
        if subject.data is None and subject.batches is None:
            raise ConfigError(
                "analyzer.quant_impact",
                "needs token windows: a text dataset (dataset=...) or a DataLoader of token batches",
            )

    def headline(self, result: Result) -> dict[str, float]:
        """Nothing beside the strategies table: every per-strategy metric is a column of it."""
        return {}

    def summary_tables(self, result: Result) -> dict[str, list[dict]]:
        """The strategies side by side in the columns a reader compares, and the strategies that could
        not run; the full table (every column), the memory timeline and the CSVs are in the JSON and
        MLflow."""
        rows = result.tables.get("strategies", [])
        shown = {"strategies": [_shown_row(r) for r in rows]}
        if result.tables.get("unsupported"):
            shown["could not run"] = result.tables["unsupported"]
        return shown
