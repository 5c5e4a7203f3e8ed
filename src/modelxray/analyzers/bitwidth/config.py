"""Bit-width analyzer: how quality trades against size across quantization configurations.

Evaluates uniform, attention-vs-MLP mixed, progressive and custom RTN plans against the model's
own outputs (loss, perplexity, top-1 agreement, KL), measures per-layer sensitivity (one block's
attention or MLP at low bits at a time), finds the Pareto frontier of quality vs effective bits,
and recommends the smallest plan within a perplexity budget, built greedily from the sensitivity
ranking and confirmed by a full evaluation.

Cost: the reference outputs are computed once; every configuration quantizes one working copy
restored from the original weights in memory (no reloads, no per-configuration copies).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from modelxray.analyzers.base import Analyzer
from modelxray.core.errors import ConfigError
from modelxray.core.result import Result, RunContext


@dataclass
class BitwidthAnalyzer(Analyzer):
    name: ClassVar[str] = "bitwidth"
    plots_module: ClassVar[str] = "modelxray.analyzers.bitwidth.plots"
    uniform_bits: list[int] = field(default_factory=lambda: [8, 6, 4, 3, 2])
    symmetric: bool = True
    granularity: str = "group"  # tensor | channel | group
    group_size: int = 128  # a narrower last group when it does not divide in_features
    scale_dtype: str = "float16"
    targets: list[str] = field(default_factory=lambda: ["linear"])  # linear | conv | embedding | lm_head
    high_bits: int = 8  # mixed / progressive / recommendation: the protected modules
    low_bits: int = 4  # ... and everything else
    mixed: bool = True  # attention at high_bits, MLP at low_bits, and the reverse
    progressive: bool = True  # high_bits in the first and last progressive_edge blocks
    progressive_edge: int = 2
    custom: dict = field(default_factory=dict)  # name: [rules], rules as in conf/quant/custom.yaml
    sensitivity: bool = True
    sensitivity_bits: int = 3
    sensitivity_windows: int = 4  # windows evaluated per sensitivity probe
    budget_ppl_increase: float = 0.05  # +5% perplexity over the unquantized model
    recommend: bool = True
    max_windows: int | None = None  # evaluate configurations on at most this many windows (null: all)
    kl_windows: int = 8  # windows whose full reference distribution is kept for exact KL
    batch_size: int = 4

    def validate(self) -> None:
        from modelxray.analyzers.bitwidth.run import _fmt
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
        self.require_positive("group_size", "progressive_edge", "sensitivity_windows", "batch_size", "kl_windows")
        self.require_positive("max_windows", allow_none=True)
        if self.budget_ppl_increase < 0:
            raise ConfigError("budget_ppl_increase", f"must be >= 0, got {self.budget_ppl_increase}")
        for name, rules in self.custom.items():
            try:
                parse_rules(rules)
            except ConfigError as exc:
                raise exc.under(f"custom.{name}") from None
        WeightQuantizer(**_fmt(self, self.low_bits))  # validates the format

    def preflight(self, subject) -> None:
        if subject.data is None:
            raise ConfigError("analyzer.bitwidth", "needs a dataset of token windows (not a user DataLoader)")

    def run(self, subject, ctx: RunContext) -> Result:
        from modelxray.analyzers.bitwidth.run import run

        return run(self, subject, ctx)
