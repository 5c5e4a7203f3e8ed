"""lm-eval analyzer: the tasks of lm-evaluation-harness, the yardstick quantization papers report
(ARC, HellaSwag, PIQA, WinoGrande, MMLU ...), run on the model as loaded and quantized, in memory,
with the run's tokenizer: no second load from disk.

By default it runs an offline pack of two tasks over the Python documentation (``offline_tasks``):
a multiple-choice question (which documentation topic a passage is from; acc and acc_norm, as ARC is
scored) and a cloze (a sentence's last word; perplexity and acc, as LAMBADA is scored). A hub task
name (``tasks=[arc_easy]``) works where the hub, or a filled Hugging Face datasets cache, holds its
data; ``include_path`` adds a folder of your own task YAMLs. Each task's metrics are logged as
``lm_eval/<task>/<metric>`` with lm-eval's standard error as ``<metric>_se``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import ClassVar

from modelxray.analyzers.base import Analyzer
from modelxray.core.errors import ConfigError, require_library
from modelxray.kinds.causal_lm import CausalLM


@dataclass
class LmEvalAnalyzer(Analyzer):
    name: ClassVar[str] = "lm_eval"
    plots_module: ClassVar[str] = "modelxray.analyzers.lm_eval.plots"
    run_module: ClassVar[str] = "modelxray.analyzers.lm_eval.run"
    insights_module: ClassVar[str] = "modelxray.analyzers.lm_eval.insights"
    model_kinds: ClassVar[tuple[type, ...]] = (CausalLM,)
    tasks: list[str] = field(default_factory=lambda: ["pydoc_topic_mc", "pydoc_cloze"])  # lm-eval tasks or groups
    num_fewshot: int | None = None  # examples in each prompt; null: each task's own default
    limit: float | None = None  # documents per task (a count, or a share below 1); null: all
    batch_size: int = 8  # requests per forward pass
    include_path: str | None = None  # a folder of your own task YAMLs, registered beside lm-eval's
    apply_chat_template: bool = False  # wrap each prompt in the tokenizer's chat template
    gen_kwargs: dict | None = None  # generation tasks: e.g. {max_gen_toks: 64, temperature: 0}
    max_length: int | None = None  # longest context in tokens; null: the model's own
    bootstrap_iters: int = 1000  # resamples for the standard error of metrics without a closed form

    def validate(self) -> None:
        require_library("analyzer.lm_eval", "analyzer=lm_eval", "lm_eval", "lm-eval", "lm_eval")
        if not self.tasks:
            raise ConfigError("tasks", "is empty: name lm-eval tasks, e.g. [pydoc_topic_mc, arc_easy]")
        self.require_positive("max_length", allow_none=True)
        self.require_positive("batch_size")
        self.require_non_negative("num_fewshot", "bootstrap_iters")
        if self.limit is not None and not self.limit > 0:
            raise ConfigError("limit", f"must be a count of documents or a share in (0, 1); got {self.limit}")
        if self.include_path is not None and not os.path.isdir(os.path.expanduser(self.include_path)):
            raise ConfigError(
                "include_path", f"folder {self.include_path!r} does not exist: give a folder of task YAMLs"
            )
        from modelxray.analyzers.lm_eval.tasks_check import check_tasks

        check_tasks(self)

    def unquantized_baseline(self, subject, seed: int) -> dict:
        """Every document's scores on the model before ``quant=`` changes it (one more lm-eval pass),
        so each task's change is paired by document."""
        from modelxray.core.configurable import implementation

        return implementation(self.run_module).baseline(self, subject, seed)

    def headline(self, result) -> dict[str, float]:
        """Each task's figures (``<task>_<metric>``) for the summary table."""
        return {f"{r['task']}_{r['metric']}": r["value"] for r in result.tables.get("tasks") or []}

    def summary_tables(self, result) -> dict[str, list[dict]]:
        """The tasks, and each task's change against the baseline, paired by document."""
        out = {"tasks": result.tables.get("tasks") or []}
        if result.tables.get("paired"):
            out[f"against {result.data.get('baseline', 'the baseline')}, paired by document"] = result.tables["paired"]
        return out

    def preflight(self, subject) -> None:
        """lm-eval tokenizes with a Hugging Face tokenizer and runs a transformers model."""
        if not hasattr(subject.tokenizer, "apply_chat_template") or not hasattr(subject.tokenizer, "decode"):
            raise ConfigError(
                "analyzer.lm_eval",
                f"runs with a Hugging Face tokenizer, and {subject.info.name} has {type(subject.tokenizer).__name__}: "
                "load the model with its own tokenizer (model.tokenizer=null or a tokenizer directory)",
            )
        if getattr(subject, "stream", None) is not None:
            raise ConfigError("analyzer.lm_eval", "runs the whole model in memory: use runtime.offload=none")
