"""GradientFlowCallback: per-layer gradient norms over training steps, with vanishing/exploding flags.

Runs in ``on_step_end``, where the loop guarantees ``p.grad`` still holds this step's gradients.
Metrics every ``every_n_steps`` steps:

- ``grad_flow/layer_<name>/norm`` (when ``log_layers``), ``<name>`` the owning module's name;
- ``grad_flow/total_norm``; ``grad_flow/min_layer_norm``, ``grad_flow/max_layer_norm``;
- ``grad_flow/vanishing_layers`` and ``grad_flow/exploding_layers``: layers past a threshold at this step.

Report: ``grad_flow/flagged_vanishing`` / ``grad_flow/flagged_exploding`` (layers past a threshold in
at least ``flag_share`` of measured steps), a per-layer table, and the norm matrix for the plot.
Non-finite gradient norms are recorded as +inf (they count as exploding).
"""

from __future__ import annotations

import fnmatch
from typing import Any

import numpy as np

from modelxray.core.callbacks import CallbackReport, TrainState
from modelxray.learning_dynamics.callbacks.base import LearningCallback
from modelxray.learning_dynamics.callbacks.configs import GradientFlowConfig
from modelxray.learning_dynamics.gradient_flow import FlowThresholds, flow_flags, layer_grad_norms


class GradientFlowCallback(LearningCallback):
    name = "gradient_flow"
    config_class = GradientFlowConfig

    def __init__(self, config: GradientFlowConfig | dict | None = None, **overrides: Any):
        super().__init__(config, **overrides)
        self.layers: list[str] = []
        self.steps: list[int] = []
        self.rows: list[np.ndarray] = []  # one per measured step, aligned with self.layers (NaN = absent)

    @property
    def thresholds(self) -> FlowThresholds:
        return FlowThresholds(self.config.vanishing, self.config.exploding, self.config.flag_share)

    def on_step_end(self, state: TrainState):
        if state.step % self.config.every_n_steps:
            return None
        norms = layer_grad_norms(state.model)
        if self.config.layers:
            norms = {k: v for k, v in norms.items() if any(fnmatch.fnmatchcase(k, p) for p in self.config.layers)}
        if not norms:
            return None
        for name in norms:
            if name not in self.layers:
                self.layers.append(name)
        row = np.full(len(self.layers), np.nan)
        for name, v in norms.items():
            row[self.layers.index(name)] = v if np.isfinite(v) else np.inf
        self.steps.append(int(state.step))
        self.rows.append(row)
        vals = row[~np.isnan(row)]
        t = self.thresholds
        out = {
            "grad_flow/total_norm": float(np.sqrt((vals**2).sum())),
            "grad_flow/min_layer_norm": float(vals.min()),
            "grad_flow/max_layer_norm": float(vals.max()),
            "grad_flow/vanishing_layers": float((vals < t.vanishing).sum()),
            "grad_flow/exploding_layers": float((vals > t.exploding).sum()),
        }
        if self.config.log_layers:
            out.update({f"grad_flow/layer_{k}/norm": float(row[self.layers.index(k)]) for k in norms})
        return {k: v for k, v in out.items() if np.isfinite(v)}

    def norms(self) -> np.ndarray:
        """(layers, measured steps) matrix of gradient norms, NaN where a layer had no gradient."""
        m = np.full((len(self.layers), len(self.rows)), np.nan)
        for j, row in enumerate(self.rows):
            m[: len(row), j] = row
        return m

    def report(self) -> CallbackReport:
        if not self.rows:
            return CallbackReport(insights=["Gradient flow: no step was measured."])
        m = self.norms()
        flags = flow_flags(m, self.thresholds)
        table = []
        with np.errstate(all="ignore"):
            for i, name in enumerate(self.layers):
                v = m[i][~np.isnan(m[i])]
                flag = "vanishing" if flags["vanishing"][i] else "exploding" if flags["exploding"][i] else ""
                table.append(
                    {
                        "layer": name,
                        "mean_norm": float(v.mean()),
                        "median_norm": float(np.median(v)),
                        "min_norm": float(v.min()),
                        "max_norm": float(v.max()),
                        "last_norm": float(v[-1]),
                        "vanishing_share": float(flags["vanishing_share"][i]),
                        "exploding_share": float(flags["exploding_share"][i]),
                        "flag": flag,
                    }
                )
        van = [r["layer"] for r in table if r["flag"] == "vanishing"]
        exp = [r["layer"] for r in table if r["flag"] == "exploding"]
        metrics = {
            "grad_flow/flagged_vanishing": float(len(van)),
            "grad_flow/flagged_exploding": float(len(exp)),
            "grad_flow/layers": float(len(self.layers)),
            "grad_flow/steps_measured": float(len(self.steps)),
        }
        t = self.thresholds
        share = f"in >= {t.flag_share:.0%} of steps"
        insights = []
        if van:
            insights.append(f"Vanishing gradients (norm < {t.vanishing:g} {share}): {', '.join(van)}.")
        if exp:
            insights.append(f"Exploding gradients (norm > {t.exploding:g} {share}): {', '.join(exp)}.")
        if not insights:
            insights.append(f"Gradient flow: no layer vanishing or exploding over {len(self.steps)} measured steps.")
        data = {
            "steps": self.steps,
            "layers": self.layers,
            "norms": [[None if np.isnan(x) else float(x) for x in row] for row in m],
        }
        return CallbackReport(metrics=metrics, tables={"gradient_flow": table}, data=data, insights=insights)

    def state_dict(self) -> dict[str, Any]:
        return {"layers": list(self.layers), "steps": list(self.steps), "norms": self.norms()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.layers, self.steps = list(state["layers"]), [int(s) for s in state["steps"]]
        m = np.asarray(state["norms"], np.float64)
        self.rows = [m[:, j].copy() for j in range(m.shape[1])]
