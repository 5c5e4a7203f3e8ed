"""FeatureEvolutionTracker: how named layers' representations change across epochs or checkpoints,
on FeatureEvolutionCallback; FEATURE_METRICS maps the tracker's metric names to the callback's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from modelxray.core.callbacks import TrainState
from modelxray.core.errors import ConfigError
from modelxray.learning_dynamics.callbacks.configs import FeatureEvolutionConfig
from modelxray.learning_dynamics.callbacks.features import FeatureEvolutionCallback
from modelxray.learning_dynamics.loaders import batch_pair
from modelxray.learning_dynamics.trackers._shared import _config, _save_figures

# the tracker's feature-metric names -> the feature callback's
FEATURE_METRICS = {
    "silhouette_score": "silhouette",
    "silhouette": "silhouette",
    "probe_accuracy": "probe_accuracy",
    "cka_prev": "cka_prev",
    "pca_explained": "pca_explained",
}


class FeatureEvolutionTracker:
    """How the representations of named layers of any model change across epochs or checkpoints.

    ``track_epoch(dataloader, epoch, sample_limit=None)`` takes a snapshot of ``layer_names``'
    activations (forward hooks held only for that pass) on a fixed sample: the first
    ``sample_limit`` (at most ``max_samples_store``) examples the first call's loader yields,
    kept for every later snapshot so that they compare the same examples. Per snapshot and layer:
    ``silhouette_score`` (classes as clusters), ``probe_accuracy`` (a held-out linear probe),
    ``cka_prev`` (linear CKA to the previous snapshot), ``pca_explained``; for a model with a
    ``residue_embedding()`` (modular tasks) also the Fourier sparsity and weight norm.
    Load checkpoints into ``tracker.model`` between calls."""

    def __init__(
        self,
        model: nn.Module,
        layer_names: list[str],
        device: Any = None,
        max_samples_store: int = 1000,
        **options: Any,
    ):
        if isinstance(layer_names, str) or not layer_names:
            raise ConfigError("layer_names", f"must be a non-empty list of module names, got {layer_names!r}")
        modules = dict(model.named_modules())
        for name in layer_names:
            if name not in modules:
                some = ", ".join(n for n in list(modules)[1:13])
                raise ConfigError("layer_names", f"no module named {name!r} in {type(model).__name__}; modules: {some}")
        if max_samples_store < 1:
            raise ConfigError("max_samples_store", f"must be positive, got {max_samples_store}")
        self.model = model
        self.layer_names = list(layer_names)
        self.device = device
        self.max_samples_store = int(max_samples_store)
        unused = ("every_n_epochs", "sample_size", "sample_split")  # track_epoch's loader and sample_limit decide
        self.config = _config(
            FeatureEvolutionConfig, "FeatureEvolutionTracker", options, unused, layers=self.layer_names
        )
        self.callback = FeatureEvolutionCallback(self.config)
        self._dataset: Any = None

    def track_epoch(self, dataloader, epoch: int, sample_limit: int | None = None) -> dict[str, dict[str, float]]:
        """One snapshot labelled ``epoch``; returns ``{layer: {metric: value}}``."""
        dataset = getattr(dataloader, "dataset", dataloader)
        if self._dataset is None:
            self._take_sample(dataloader, sample_limit)
            self._dataset = dataset
        elif dataset is not self._dataset:
            raise ConfigError(
                "dataloader",
                "differs from the first call's: the snapshots compare one fixed sample; use one tracker per dataset",
            )
        self.callback.snapshot(TrainState(model=self.model, step=int(epoch), epoch=int(epoch)))
        k = len(self.callback.steps) - 1
        return {layer: self._stats(layer, k) for layer in self.layer_names}

    def _take_sample(self, loader, sample_limit: int | None) -> None:
        limit = self.max_samples_store if sample_limit is None else min(int(sample_limit), self.max_samples_store)
        if limit < 1:
            raise ConfigError("sample_limit", f"must be positive, got {sample_limit}")
        xs, ys, n = [], [], 0
        with torch.random.fork_rng(devices=[]):
            for batch in loader:
                x, y = batch_pair(batch, "dataloader")
                xs.append(x.detach().cpu())
                ys.append(y.detach().cpu())
                n += len(y)
                if n >= limit:
                    break
        if not xs:
            raise ConfigError("dataloader", "yielded no batch")
        self.callback.use_sample(torch.cat(xs)[:limit], torch.cat(ys)[:limit], self.layer_names)

    def _stats(self, layer: str, k: int) -> dict[str, float]:
        out = {}
        for seed_name, name in (
            ("silhouette_score", "silhouette"),
            ("probe_accuracy", "probe_accuracy"),
            ("cka_prev", "cka_prev"),
            ("pca_explained", "pca_explained"),
        ):
            series = self.callback.metrics.get(f"{layer}/{name}", [])
            out[seed_name] = series[k] if k < len(series) else float("nan")
        return out

    def analyze_evolution(self) -> dict[str, dict[str, Any]]:
        """Per layer: ``epochs``, ``statistics`` (one dict per snapshot: ``silhouette_score``,
        ``probe_accuracy``, ``cka_prev``, ``pca_explained``), ``cka_first_final`` (linear CKA of the
        first snapshot to the last) and ``cka_to_final`` (every kept snapshot to the last)."""
        if not self.callback.steps:
            raise RuntimeError("no snapshot yet: call track_epoch first")
        report = self.callback.report()
        out = {}
        for layer in self.layer_names:
            final = report.data.get("cka_final", {}).get(layer, {})
            out[layer] = {
                "epochs": list(self.callback.epochs),
                "statistics": [self._stats(layer, k) for k in range(len(self.callback.steps))],
                "cka_first_final": report.metrics.get(f"features/{layer}/cka_first_final"),
                "cka_to_final": dict(zip(final.get("steps", []), final.get("cka", []))),
            }
        return out

    def detect_phase_transitions(self, layer_name: str, metric: str = "silhouette_score", **options: Any) -> list[int]:
        """Epochs where ``metric`` of ``layer_name`` changes level: change points of its series
        (:func:`modelxray.learning_dynamics.transitions.change_points`; ``options`` are its keywords, e.g.
        ``min_gain``), in epoch order. A series needs at least 4 snapshots."""
        from modelxray.learning_dynamics.transitions import change_points

        name = self._metric(layer_name, metric)
        values = self.callback.metrics.get(f"{layer_name}/{name}", [])
        epochs = self.callback.epochs[: len(values)]
        return sorted(cp.step for cp in change_points(values, epochs, metric=f"{layer_name}/{name}", **options))

    def _metric(self, layer_name: str, metric: str) -> str:
        if layer_name not in self.layer_names:
            raise ConfigError("layer_name", f"is not tracked: {layer_name!r}; tracked: {', '.join(self.layer_names)}")
        if metric not in FEATURE_METRICS:
            raise ConfigError("metric", f"must be one of {', '.join(FEATURE_METRICS)}; got {metric!r}")
        return FEATURE_METRICS[metric]

    def _layer_data(self, layer_name: str) -> dict[str, Any]:
        """The feature report's data restricted to one layer (what the plot builders draw)."""
        if not self.callback.steps:
            raise RuntimeError("no snapshot yet: call track_epoch first")
        self._metric(layer_name, "silhouette")
        data = self.callback.report().data
        return {
            **data,
            "layers": [layer_name],
            "series": {
                k: v
                for k, v in data["series"].items()
                if k.startswith(layer_name + "/") or k in ("fourier_sparsity", "weight_norm")
            },
            "cka_final": {k: v for k, v in data.get("cka_final", {}).items() if k == layer_name},
            "pca": [{"step": p["step"], "layers": {layer_name: p["layers"][layer_name]}} for p in data.get("pca", [])],
        }

    def visualize_evolution(self, layer_name: str, save_dir: str | Path | None = None, method: str = "pca") -> dict:
        """``feature_<method>_<layer>.png``: the layer's activations in 2-D (PCA, or t-SNE for a tracker
        built with ``projection="tsne"``) at up to ``pca_snapshots`` evenly spaced snapshots, coloured
        by class."""
        from modelxray.learning_dynamics.plots import _features

        if method not in ("pca", "tsne"):
            raise ConfigError("method", f"must be pca or tsne, got {method!r}")
        projection = self.callback.config.projection
        if method != projection:
            raise ConfigError(
                "method",
                f"the snapshots were drawn with {projection}; build the tracker with projection={method!r} "
                f"to draw {method} (each snapshot is projected when it is taken)",
            )
        figs = _features(self._layer_data(layer_name), {}, {}, unit="epoch")
        return _keep(figs, f"feature_{method}.png", f"feature_{method}_{layer_name}.png", save_dir)

    def plot_metrics_evolution(self, layer_name: str, save_dir: str | Path | None = None) -> dict:
        """``feature_metrics_<layer>.png``: silhouette, probe accuracy, CKA to the previous and final
        snapshot over epochs (with Fourier sparsity and weight norm for modular models)."""
        from modelxray.learning_dynamics.plots import _features

        figs = _features(self._layer_data(layer_name), {}, {}, unit="epoch")
        return _keep(figs, "feature_evolution.png", f"feature_metrics_{layer_name}.png", save_dir)

    def remove_hooks(self) -> None:
        """Nothing to remove: hooks are registered only for the pass of each snapshot and removed after it."""


def _keep(figs: dict, name: str, new_name: str, save_dir) -> dict:
    """Save (or return) only ``figs[name]`` under ``new_name``; close the others."""
    import matplotlib.pyplot as plt

    for k, fig in figs.items():
        if k != name:
            plt.close(fig)
    if name not in figs:
        return {}
    return _save_figures({name: figs[name]}, save_dir, {name: new_name})
