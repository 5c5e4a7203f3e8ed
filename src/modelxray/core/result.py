"""What a stage of a run returns (an analyzer, the quantizer, the trainer) and what it may use.

A ``Result`` keeps the object that produced it (``source``): the report writer asks that object to
draw its figures, its dashboard panel and its insights, so presentation is found through the
producing class, never through the YAML key the user happened to choose.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

M = TypeVar("M")


@runtime_checkable
class Presenter(Protocol):
    """How a result draws itself. Every method may return nothing; plotting modules are imported
    inside ``figures``/``panel`` so that importing an analyzer never imports matplotlib."""

    def figures(self, result: Result) -> dict[str, Any]: ...  # file name -> matplotlib Figure
    def panel(self, ax: Any, result: Result) -> bool: ...  # draws the dashboard panel, False if none
    def insights(self, result: Result, results: dict[str, Result]) -> list[str]: ...


@runtime_checkable
class Measurement(Protocol):
    """A typed measurement (``modelxray.metrics.measurements``: ``Latency``, ``Speed``, ``Memory``,
    ``Quality``): it names its own metrics, serialises and renders itself."""

    def to_metrics(self) -> dict[str, float]: ...  # the flat metrics logged for it (names fixed)
    def to_dict(self) -> dict[str, Any]: ...  # its JSON form, as stored in Result.data
    def markdown(self) -> str: ...  # one line for the summary report


@dataclass
class Result:
    """What a stage returns: flat numeric metrics, tables (lists of records), raw JSON-able data,
    insight sentences, extra text files, and, when it raised, the traceback instead.

    ``measurements`` holds typed measurements (``record``); presenters read their attributes
    (``speed.latency.p95_ms``) instead of string keys. They live in memory: the producer stores
    each one's ``to_dict()`` in ``data`` for the JSON, in the layout it chooses, and ``to_json``
    leaves them out so nothing is written twice."""

    analyzer: str
    metrics: dict[str, float] = field(default_factory=dict)
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    insights: list[str] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)  # extra text reports: file name -> content
    files: dict[str, bytes] = field(default_factory=dict)  # extra binary files: relative path -> bytes
    error: str | None = None  # traceback text when the stage failed
    seconds: float = 0.0
    source: Presenter | None = field(default=None, repr=False, compare=False)  # what made it; draws it
    measurements: dict[str, Measurement] = field(default_factory=dict, repr=False)  # name -> typed measurement

    def sentences(self, results: dict[str, Result] | None = None) -> list[str]:
        """What insights.md says of this result: its source's insights (which may read the other
        results of the run) followed by the sentences the stage wrote itself."""
        said = self.source.insights(self, results or {self.analyzer: self}) if self.source is not None else []
        return said + list(self.insights)

    @property
    def ok(self) -> bool:
        return self.error is None

    def record(self, name: str, measurement: Measurement) -> None:
        """Keep ``measurement`` under ``name`` and add its metrics (``measurement.to_metrics()``)."""
        self.measurements[name] = measurement
        self.metrics.update(measurement.to_metrics())

    def measurements_of(self, kind: type[M]) -> dict[str, M]:
        """The measurements of one type, in the order they were recorded."""
        return {k: m for k, m in self.measurements.items() if isinstance(m, kind)}

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
    """Per-run facilities a stage may use: where to write, the seed, whether progress bars show, and
    a scratch space shared by the analyzers of one run (e.g. reference logits computed once)."""

    output_dir: Path
    seed: int = 0
    progress: bool = True
    shared: dict[str, Any] = field(default_factory=dict)
    # where analyzers that change weights in place keep the originals (core.original_weights)
    original_weights: str = "auto"

    def keep_originals(self, model, names=None):
        """The original values of ``model``'s tensors ``names`` (default: all), kept where
        ``original_weights`` says (a file goes in the run directory); restore them when done."""
        from modelxray.core.original_weights import OriginalWeights

        return OriginalWeights(model, self.original_weights, self.output_dir, names)
