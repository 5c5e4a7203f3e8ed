"""Bit-width analyzer: how quality trades against size across quantization configurations.

Evaluates uniform, attention-vs-MLP mixed, progressive and custom RTN plans against the model's
own outputs, measures per-layer sensitivity, finds the Pareto frontier of quality vs effective bits,
and recommends the smallest plan within a quality budget, built greedily from the sensitivity
ranking and confirmed by a full evaluation.

A language model is scored on token windows (loss, perplexity, top-1 agreement, KL); sensitivity
is one block's attention or MLP at low bits at a time; the budget is a perplexity increase. A
classifier (``task: classification``) is scored on the first ``eval_examples`` test examples (loss,
accuracy with its 95% interval, zero-shot accuracy for a CLIP-style dual encoder, top-1 agreement
and KL against the unquantized model); sensitivity is one block of each tower at a time (``modes``,
``blocks``); the budget is an accuracy drop.

Cost: the reference outputs are computed once; every configuration quantizes one working copy
restored from the original weights in memory (no reloads, no per-configuration copies).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import ClassVar

from modelxray.analyzers.base import Analyzer
from modelxray.core.errors import ConfigError
from modelxray.kinds.causal_lm import CausalLM
from modelxray.kinds.classifier import Classifier
from modelxray.kinds.labelled_images import LabelledImagesKind
from modelxray.kinds.speech_ctc import SpeechCTC
from modelxray.kinds.table import kind_of
from modelxray.kinds.windows import WindowsKind

# keys that only mean something for token windows: a classifier run must leave them at their defaults
LM_ONLY = ("max_windows", "kl_windows", "sensitivity_windows", "batch_size", "budget_ppl_increase")


@dataclass
class BitwidthAnalyzer(Analyzer):
    name: ClassVar[str] = "bitwidth"
    quantizes_itself: ClassVar[bool] = True
    # streamed from disk: configurations, sensitivity probes and search steps share reads of the model
    streams_blocks: ClassVar[bool] = True
    plots_module: ClassVar[str] = "modelxray.analyzers.bitwidth.plots"
    run_module: ClassVar[str] = "modelxray.analyzers.bitwidth.run"
    insights_module: ClassVar[str] = "modelxray.analyzers.bitwidth.insights"
    model_kinds: ClassVar[tuple[type, ...]] = (CausalLM, Classifier, WindowsKind, LabelledImagesKind)
    uniform_bits: list[int] = field(default_factory=lambda: [8, 6, 4, 3, 2])
    symmetric: bool = True
    granularity: str = "group"  # tensor | channel | group
    group_size: int = 128  # a narrower last group when it does not divide in_features
    scale_dtype: str = "float16"
    targets: list[str] = field(default_factory=lambda: ["linear", "conv"])  # linear | conv | embedding | lm_head
    high_bits: int = 8  # mixed / progressive / recommendation: the protected modules
    low_bits: int = 4  # ... and everything else
    mixed: bool = True  # attention at high_bits, MLP at low_bits, and the reverse
    progressive: bool = True  # high_bits in the first and last progressive_edge blocks
    progressive_edge: int = 2
    custom: dict | str | None = None  # name: rules or one {attn_bits, mlp_bits} per block, or a YAML file of them
    sensitivity: bool = True
    sensitivity_bits: int = 3
    sensitivity_windows: int = 4  # windows evaluated per sensitivity probe
    sensitivity_examples: int = 256  # classifier: test examples per sensitivity probe and recommendation step
    budget_ppl_increase: float = 0.05  # +5% perplexity over the unquantized model
    budget_accuracy_drop: float = 0.01  # classifier: accuracy the recommendation may lose (0.01 = 1 point)
    agreement_floor: float = 0.9  # the recommendation keeps at least this top-1 agreement with the unquantized model
    kl_ceiling: float = 0.25  # ... and at most this KL (nats) from it, where measured
    recommend: bool = True
    max_windows: int | None = None  # evaluate configurations on at most this many windows (null: all)
    kl_windows: int = 8  # windows whose full reference distribution is kept for exact KL
    batch_size: int = 4  # windows per forward pass
    eval_examples: int = 512  # classifier: test examples scored per configuration
    eval_batch_size: int = 64  # classifier: test examples per forward pass
    # a model streamed from disk: levels of the recommendation's binary search evaluated per read of the
    # model (2^levels - 1 plans per read; the same plan is found, in fewer reads for more compute)
    stream_search_levels: int = 2
    # language models: score every configuration on an lm-eval task's metric too, <task>/<metric> such as
    # pydoc_topic_mc/acc, and draw the Pareto front on it (the recommendation keeps its perplexity budget)
    rank_by_task: str | None = None
    task_limit: float | None = None  # rank_by_task: documents of the task per configuration; null: all

    def weight_format(self, bits: int, rules: list | None = None, targets: list | None = None) -> dict:
        """The keys of a WeightQuantizer at ``bits`` in this analyzer's format (symmetry, granularity,
        group size, scale dtype), with per-block ``rules`` and ``targets`` (default: ``targets``)."""
        return dict(
            bits=bits,
            symmetric=self.symmetric,
            granularity=self.granularity,
            group_size=self.group_size,
            scale_dtype=self.scale_dtype,
            targets=self.targets if targets is None else targets,
            rules=rules or [],
        )

    def validate(self) -> None:
        from modelxray.analyzers.bitwidth.custom_plans import check_layer_plan, is_layer_plan, load_custom
        from modelxray.quant.plan import check_bits, parse_rules
        from modelxray.quant.rtn import GRANULARITIES
        from modelxray.quant.weight import WeightQuantizer

        for b in self.uniform_bits:
            check_bits(b, "uniform_bits")
        for key in ("high_bits", "low_bits", "sensitivity_bits"):
            check_bits(getattr(self, key), key)
        if self.low_bits >= self.high_bits:
            raise ConfigError("low_bits", f"must be below high_bits ({self.high_bits}), got {self.low_bits}")
        self.require_choice("granularity", GRANULARITIES)
        self.require_positive(
            "group_size",
            "progressive_edge",
            "sensitivity_windows",
            "batch_size",
            "kl_windows",
            "sensitivity_examples",
            "eval_examples",
            "eval_batch_size",
            "stream_search_levels",
        )
        self.require_positive("max_windows", "task_limit", allow_none=True)
        self.require_non_negative("budget_ppl_increase", "budget_accuracy_drop", "kl_ceiling")
        if not 0 <= self.agreement_floor <= 1:
            raise ConfigError("agreement_floor", f"must be a share in [0, 1], got {self.agreement_floor}")
        if self.budget_accuracy_drop > 1:
            raise ConfigError(
                "budget_accuracy_drop",
                f"must be a fraction from 0 to 1 (0.01 = 1 point), got {self.budget_accuracy_drop}",
            )
        self.custom = load_custom(self.custom)  # files read, so a run and its checks see the plans
        for name, plan in self.custom.items():
            if is_layer_plan(plan):
                check_layer_plan(plan, f"custom.{name}")
                continue
            try:
                parse_rules(plan)
            except ConfigError as exc:
                raise exc.under(f"custom.{name}") from None
        WeightQuantizer(**self.weight_format(self.low_bits))  # validates the format
        self.ranking()  # the task known, its documents readable

    def ranking(self):
        """The lm-eval task metric every configuration is scored on (``rank_by_task``), or None."""
        from modelxray.analyzers.lm_eval.ranking import task_ranking

        return task_ranking(self.rank_by_task, self.task_limit, self.batch_size)

    def stream_refusal(self, quant=None) -> tuple[str, str, str] | None:
        if self.rank_by_task is None:
            return None
        return (
            "analyzer.bitwidth.rank_by_task",
            "lm-eval runs each configuration's whole model in memory, which a model streamed from disk never is",
            "set rank_by_task=null, or use runtime.offload=none",
        )

    def reference_windows(self) -> tuple[int | None, int, int]:
        return self.max_windows, self.batch_size, self.kl_windows

    def preflight(self, subject) -> None:
        kind = kind_of(subject)
        if isinstance(kind, SpeechCTC):
            kind.refuse_position_scoring("analyzer.bitwidth", subject.info.name)
        if isinstance(kind, LabelledImagesKind):
            return  # its images come with the run (its kind builds them)
        if isinstance(kind, Classifier):
            self._preflight_classifier(subject)
        elif subject.data is None and subject.batches is None:
            raise ConfigError(
                "analyzer.bitwidth",
                "needs token windows: a text dataset (dataset=...) or a DataLoader of token batches",
            )
        self._preflight_model(subject)

    def _preflight_classifier(self, subject) -> None:
        from modelxray.data.base import ClassificationData

        if not isinstance(subject.data, ClassificationData) or subject.data.n_samples == 0:
            raise ConfigError(
                "analyzer.bitwidth",
                "needs the test split of a classification dataset for a classifier, e.g. dataset=digits",
            )
        defaults = {f.name: f.default for f in fields(self)}
        for key in LM_ONLY:
            unused = defaults[key]
            if getattr(self, key) != unused:
                raise ConfigError(
                    key,
                    f"applies to language models (token windows) only; {subject.info.name} is a classifier: "
                    f"leave it at {'null' if unused is None else unused}",
                )

    def _preflight_model(self, subject) -> None:
        """``targets`` must reach a module of the model, every per-layer plan must fit its blocks, and
        every custom rule must match a module."""
        from modelxray.analyzers.bitwidth.custom_plans import resolve_rules
        from modelxray.quant.targets import find_targets
        from modelxray.quant.weight import WeightQuantizer

        found = find_targets(subject.model)
        if not any(t.kind in self.targets for t in found):
            kinds = sorted({t.kind for t in found}) or ["none"]
            raise ConfigError(
                "targets",
                f"{self.targets} matches no module of {subject.info.name} (its kinds: {', '.join(kinds)}); "
                "e.g. targets=[linear, conv]",
            )
        for name, rules in resolve_rules(self.custom, subject.model, self.targets).items():
            try:
                WeightQuantizer(**self.weight_format(self.low_bits, rules)).plan_for(subject.model)
            except ConfigError as exc:
                raise ConfigError(f"custom.{name}{exc.key.removeprefix('quant.rules')}", exc.message) from None
