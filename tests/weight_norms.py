"""An analyzer written outside modelxray, as docs/new_analyzer.md shows: the norm of every weight
matrix, with its own figure, dashboard panel and insight threshold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from modelxray.analyzers.base import Analyzer
from modelxray.core.errors import ConfigError
from modelxray.kinds.causal_lm import CausalLM
from modelxray.kinds.classifier import Classifier


@dataclass
class WeightNormsAnalyzer(Analyzer):
    name: ClassVar[str] = "weight_norms"
    model_kinds: ClassVar[tuple[type, ...]] = (CausalLM, Classifier)

    top: int = 5  # largest matrices listed in the table
    large_norm: float = 10.0  # a matrix whose Frobenius norm exceeds this is named in insights.md

    def validate(self) -> None:
        self.require_positive("top", "large_norm")

    def preflight(self, subject) -> None:
        if not any(p.ndim == 2 for p in subject.model.parameters()):
            raise ConfigError("analyzer.weight_norms", "the model has no weight matrix")

    def run(self, subject, ctx):
        result = self.new_result()
        rows = [
            {"tensor": n, "norm": float(p.detach().float().norm())}
            for n, p in subject.model.named_parameters()
            if p.ndim == 2
        ]
        rows.sort(key=lambda r: r["norm"], reverse=True)
        result.tables["largest"] = rows[: self.top]
        result.metrics["max_norm"] = rows[0]["norm"]
        result.metrics["matrices"] = float(len(rows))
        result.texts["weight_norms.csv"] = "tensor,norm\n" + "".join(f"{r['tensor']},{r['norm']}\n" for r in rows)
        return result

    def figures(self, result):
        from modelxray.plotting import new_figure

        fig, axes = new_figure()
        rows = result.tables["largest"]
        axes[0][0].barh([r["tensor"] for r in rows], [r["norm"] for r in rows])
        axes[0][0].set_xlabel("Frobenius norm")
        axes[0][0].set_title("Largest weight matrices")
        return {"weight_norms.png": fig}

    def panel(self, ax, result) -> bool:
        rows = result.tables["largest"]
        ax.bar(range(len(rows)), [r["norm"] for r in rows])
        ax.set_title(f"weight_norms: max {result.metrics['max_norm']:.2f}")
        return True

    def insights(self, result, results) -> list[str]:
        big = [r for r in result.tables["largest"] if r["norm"] > self.large_norm]
        return [f"{r['tensor']} has norm {r['norm']:.1f}, above {self.large_norm:g}." for r in big]
