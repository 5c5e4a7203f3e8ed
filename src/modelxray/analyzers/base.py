"""The analyzer contract. An analyzer is a config dataclass (its fields are its YAML keys) that

- ``preflight(subject)``: checks its values against the loaded model and data, before any analyzer
  works, raising ``ConfigError`` (one line, exit 2) instead of failing half-way through a run;
- ``run(subject, ctx) -> Result``: does the work, in ``run_module`` (the config names it and never
  imports it); it never calls the tracker or writes files, every artifact leaves through the Result;
- ``figures``/``panel``/``insights``: draws and explains its own Result (the report writer calls
  them through ``Result.source``); ``plots_module`` names the module that draws and
  ``insights_module`` the one that writes the sentences of insights.md (each imported only when a
  report is made, and each reading the config, never imported by it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from modelxray.core.configurable import Configurable, implementation
from modelxray.core.presentation import PlotsFromModule
from modelxray.core.result import Result, RunContext
from modelxray.kinds.causal_lm import CausalLM


@dataclass
class Analyzer(PlotsFromModule, Configurable):
    """Base of analyzer configs; subclasses set ``name`` (and ``plots_module``) and implement ``run``."""

    name: ClassVar[str] = "analyzer"
    # the model kinds it can analyze: kind classes (kinds/), a family's base class covering its members
    model_kinds: ClassVar[tuple[type, ...]] = (CausalLM,)
    # quantizes the model itself, from the weights as loaded (its baseline is those weights): a run
    # that also quantizes them with quant= would hand it a quantized baseline
    quantizes_itself: ClassVar[bool] = False
    run_module: ClassVar[str] = ""  # the module whose run(config, subject, ctx) does the work
    # the module whose insights(result, results, config) writes the sentences of insights.md from
    # the Result alone (a resumed run asks it of a Result reloaded from its file); "" = none
    insights_module: ClassVar[str] = ""
    # reports the weights as they are, NaN and Inf included: a model with such weights may run it
    studies_broken_weights: ClassVar[bool] = False
    # runs on a model streamed block by block from disk (runtime.offload=blocks, a causal LM)
    streams_blocks: ClassVar[bool] = False

    def preflight(self, subject) -> None:
        """Checks that need the loaded subject (sizes, tokenizer, layer names). Default: none."""

    def unquantized_baseline(self, subject, seed: int):
        """What this analyzer keeps of the model before ``quant=`` changes it, to pair its figures with
        (``Subject.reference_baselines[name]`` when it runs). Default: nothing."""
        return None

    def stream_refusal(self, quant=None) -> tuple[str, str, str] | None:
        """Of an analyzer that streams: ``(key, what, instead)`` when its keys (or the run's quantizer
        ``quant``) ask for work that needs the whole model in memory (checked before any weight is
        read). Default: none."""
        return None

    def reference_windows(self) -> tuple[int | None, int, int] | None:
        """Where a language model's ``reference=`` is this analyzer's baseline: the windows it scores
        (the first n of the data's disjoint windows, None: all), its batch size and its KL windows, on
        which the reference's outputs are kept for it (``Subject.reference_baselines[name]``). None:
        the analyzer takes no reference baseline (default)."""
        return None

    def run(self, subject, ctx: RunContext) -> Result:
        """The work, done by ``run_module``'s ``run(config, subject, ctx)``: the config names its
        implementation (imported only when it runs) and never imports it, so modules point one way."""
        if not self.run_module:  # pragma: no cover - a subclass sets run_module or overrides run
            raise NotImplementedError(f"{type(self).__name__} sets no run_module")
        return implementation(self.run_module).run(self, subject, ctx)

    def new_result(self) -> Result:
        """An empty Result that knows this analyzer drew it."""
        return Result(self.name, source=self)

    # -- presentation (the report writer calls these; each may produce nothing) ----------------
    # figures/panel come from ``plots_module`` (PlotsFromModule); override them to draw otherwise
    def insights(self, result: Result, results: dict[str, Result]) -> list[str]:
        """The sentences of insights.md, by ``insights_module``; none for a failed Result."""
        if not self.insights_module or not result.ok:
            return []
        return implementation(self.insights_module).insights(result, results, self)

    def summary_lead(self, result: Result) -> list[str]:
        """Sentences at the top of the analyzer's section of ``summary_report.md``, before its
        metrics (an executive summary); default: none."""
        return []

    def headline(self, result: Result) -> dict[str, float]:
        """Metrics for the summary table; grouped ones (``a/b``) stay in MLflow and the JSON."""
        return {k: v for k, v in result.metrics.items() if "/" not in k}

    def appendix_tables(self, result: Result) -> dict[str, list[dict]]:
        """Tables for the report's appendix, after the plots (rows the section leaves out); default: none."""
        return {}

    def summary_tables(self, result: Result) -> dict[str, list[dict]]:
        """Tables for ``summary_report.md`` (default: all); every table stays in the JSON and MLflow."""
        return result.tables
