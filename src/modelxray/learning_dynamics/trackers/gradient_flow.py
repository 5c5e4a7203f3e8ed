"""GradientFlowAnalyzer: per-layer gradient norms of the batches a user measures, on
GradientFlowCallback."""

from __future__ import annotations

import fnmatch
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from modelxray.core.callbacks import TrainState
from modelxray.core.errors import ConfigError
from modelxray.learning_dynamics.callbacks.configs import GradientFlowConfig
from modelxray.learning_dynamics.callbacks.gradient_flow import GradientFlowCallback
from modelxray.learning_dynamics.gradient_flow import flow_flags, layer_of
from modelxray.learning_dynamics.trackers._shared import _config, _save_figures


class GradientFlowAnalyzer:
    """Per-layer gradient norms of the batches you measure, with vanishing/exploding flags.

    Call ``track_batch_gradients(loss, epoch, batch_idx)`` after ``loss.backward()`` and before
    ``optimizer.step()``: it reads the gradients the backward left (no second backward). If no
    parameter has a gradient yet, it differentiates ``loss`` itself without touching ``.grad``.
    ``track_layers``: layer (module) names, glob patterns or parameter names; None = every layer."""

    def __init__(self, model: nn.Module, track_layers: list[str] | None = None, **options: Any):
        self.model = model
        self.track_layers = track_layers
        self.config = _config(GradientFlowConfig, "GradientFlowAnalyzer", options, layers=self._patterns(track_layers))
        self.callback = GradientFlowCallback(self.config)
        self.measured: list[tuple[int, int]] = []  # (epoch, batch_idx) of each measurement
        self.epoch_stats: list[dict[str, Any]] = []

    def _patterns(self, track_layers) -> list[str]:
        if not track_layers:
            return []
        params = dict(self.model.named_parameters())
        layers = sorted({layer_of(n) for n in params})
        out = []
        for name in track_layers:
            pattern = layer_of(name) if name in params else name
            if not any(fnmatch.fnmatchcase(layer, pattern) for layer in layers):
                raise ConfigError("track_layers", f"no layer matches {name!r}; layers: {', '.join(layers[:12])}")
            out.append(pattern)
        return out

    def track_batch_gradients(self, loss: torch.Tensor, epoch: int, batch_idx: int) -> dict[str, float]:
        """Measure this batch's per-layer gradient norms; returns the ``grad_flow/*`` metrics."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        if params and all(p.grad is None for p in params):
            if not isinstance(loss, torch.Tensor) or loss.grad_fn is None:
                raise ConfigError(
                    "loss", "has no gradients to read: call loss.backward() first, or pass the loss tensor"
                )
            grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
            for p, g in zip(params, grads):
                p.grad = g
            try:
                return self._measure(epoch, batch_idx)
            finally:
                for p in params:
                    p.grad = None
        return self._measure(epoch, batch_idx)

    def _measure(self, epoch: int, batch_idx: int) -> dict[str, float]:
        before = len(self.callback.steps)
        out = self.callback.on_step_end(TrainState(model=self.model, step=before + 1, epoch=int(epoch))) or {}
        if len(self.callback.steps) > before:
            self.measured.append((int(epoch), int(batch_idx)))
        return out

    def compute_epoch_statistics(self, epoch: int) -> dict[str, Any]:
        """Per-layer ``mean_norm``, ``std_norm``, ``min_norm``, ``max_norm`` over the epoch's measured
        batches, and ``overall``: ``mean_gradient_norm``, ``vanishing_layers``, ``exploding_layers``
        (layers past a threshold in at least ``flag_share`` of them)."""
        cols = [j for j, (e, _) in enumerate(self.measured) if e == int(epoch)]
        stat: dict[str, Any] = {"epoch": int(epoch), "layer_stats": {}, "overall": {}, "batches_measured": len(cols)}
        if not cols:
            return stat
        m = self.callback.norms()[:, cols]
        flags = flow_flags(m, self.callback.thresholds)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            for i, layer in enumerate(self.callback.layers):
                v = m[i][~np.isnan(m[i])]
                if v.size:
                    stat["layer_stats"][layer] = {
                        "mean_norm": float(v.mean()),
                        "std_norm": float(v.std()),
                        "min_norm": float(v.min()),
                        "max_norm": float(v.max()),
                    }
        means = [s["mean_norm"] for s in stat["layer_stats"].values()]
        stat["overall"] = {
            "mean_gradient_norm": float(np.mean(means)) if means else float("nan"),
            "vanishing_layers": [lay for lay, f in zip(self.callback.layers, flags["vanishing"]) if f],
            "exploding_layers": [lay for lay, f in zip(self.callback.layers, flags["exploding"]) if f],
        }
        self.epoch_stats.append(stat)
        return stat

    def analyze_gradient_flow(self) -> dict[str, Any]:
        """``layers`` (a row per layer: mean/median/min/max/last norm, vanishing/exploding share,
        flag), ``flagged_vanishing``, ``flagged_exploding``, ``epochs`` and ``overall_norms`` (per
        closed epoch), ``metrics`` and ``insights``."""
        report = self.callback.report()
        rows = report.tables.get("gradient_flow", [])
        return {
            "layers": rows,
            "flagged_vanishing": [r["layer"] for r in rows if r["flag"] == "vanishing"],
            "flagged_exploding": [r["layer"] for r in rows if r["flag"] == "exploding"],
            "epochs": [s["epoch"] for s in self.epoch_stats],
            "overall_norms": [s["overall"]["mean_gradient_norm"] for s in self.epoch_stats],
            "batches_measured": len(self.measured),
            "metrics": report.metrics,
            "insights": report.insights,
        }

    def plot_gradient_flow(self, save_dir: str | Path | None = None) -> dict:
        """``gradient_flow.png``: each layer's gradient norm over epochs (a measured batch sits at
        ``epoch + batch_idx / batches per epoch``), log scale."""
        from modelxray.learning_dynamics.plots import figures

        if not self.measured:
            raise RuntimeError("no gradients measured yet: call track_batch_gradients first")
        report = self.callback.report()
        per_epoch = max(b for _, b in self.measured) + 1
        data = {**report.data, "steps": [e + b / per_epoch for e, b in self.measured]}
        return _save_figures(figures({"gradient_flow": {**vars(report), "data": data}}, unit="epoch"), save_dir)
