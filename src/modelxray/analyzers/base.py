"""The analyzer contract: ``run(subject, ctx) -> Result``. Analyzers never call the tracker."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from modelxray.configurable import Configurable


@dataclass
class Result:
    """What an analyzer returns: flat numeric metrics, tables (lists of records), raw JSON-able data,
    insight sentences, and, when it raised, the traceback instead."""

    analyzer: str
    metrics: dict[str, float] = field(default_factory=dict)
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    insights: list[str] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)  # extra text reports: file name -> content
    error: str | None = None  # traceback text when the analyzer failed
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    def finite_metrics(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.metrics.items() if v is not None and math.isfinite(float(v))}

    def to_json(self) -> dict[str, Any]:
        return {
            "analyzer": self.analyzer,
            "ok": self.ok,
            "seconds": self.seconds,
            "metrics": self.metrics,
            "tables": self.tables,
            "data": self.data,
            "insights": self.insights,
            "error": self.error,
        }


@dataclass
class RunContext:
    """Per-run facilities an analyzer may use: where to write, the seed, progress bars, and a
    scratch space shared by the analyzers of one run (e.g. reference logits computed once)."""

    output_dir: Path
    seed: int = 0
    progress: bool = True
    shared: dict[str, Any] = field(default_factory=dict)


@dataclass
class Analyzer(Configurable):
    """Base of analyzer configs; subclasses set ``name`` and implement ``run``."""

    name: ClassVar[str] = "analyzer"
    tasks: ClassVar[tuple[str, ...]] = ("causal_lm",)  # the model kinds it can analyze

    def run(self, subject, ctx: RunContext) -> Result:  # pragma: no cover - abstract
        raise NotImplementedError
