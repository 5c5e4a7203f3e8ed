"""FeatureEvolutionCallback: how the representations of configured layers change during training.

At ``on_train_begin``, every ``every_n_epochs`` epochs and at ``on_train_end`` it takes a snapshot:
the activations of ``layers`` (module names; empty = the penultimate representation, see
:func:`modelxray.learning_dynamics.features.default_feature_layer`) on a fixed, seeded sample of
``sample_size`` examples of ``sample_split``. Per snapshot and layer it logs

- ``features/<layer>/silhouette``: silhouette score with classes as clusters;
- ``features/<layer>/probe_accuracy``: held-out accuracy of a logistic-regression probe;
- ``features/<layer>/cka_prev``: linear CKA to the previous snapshot;
- ``features/<layer>/pca_explained``: variance share of the first two principal components;

and for models on a modular task (a ``residue_embedding()`` method, or ``embedding_param`` naming a
(p, d) parameter whose first p rows are the residues):

- ``features/fourier_sparsity``: share of the embedding's energy in its ``fourier_top_k`` strongest
  frequencies (:mod:`modelxray.learning_dynamics.fourier`); ``features/weight_norm``: L2 norm of all weights.

CKA to the final snapshot is known only at the end: the report gives ``features/<layer>/cka_first_final``
and, in ``data``, the whole ``cka_final`` series with its steps. PCA coordinates of up to
``pca_snapshots`` evenly spaced snapshots are in ``data`` for the plots. Activations of at most
``max_stored_snapshots`` snapshots are kept (older ones are thinned: every other one dropped).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from modelxray.core.callbacks import CallbackReport, TrainState
from modelxray.learning_dynamics.callbacks.base import LearningCallback, finite, task_data
from modelxray.learning_dynamics.callbacks.configs import FeatureEvolutionConfig
from modelxray.learning_dynamics.cka import centered, centered_cka, gram_space, self_similarity
from modelxray.learning_dynamics.features import (
    beside,
    capture_activations,
    default_feature_layer,
    is_constant,
    linear_probe_accuracy,
    pca_projection,
    silhouette_by_class,
    single_thread,
    tsne_projection,
)
from modelxray.learning_dynamics.fourier import fourier_sparsity, top_frequencies, weight_norm


class FeatureEvolutionCallback(LearningCallback):
    name = "feature_evolution"
    config_class = FeatureEvolutionConfig

    def __init__(self, config: FeatureEvolutionConfig | dict | None = None, **overrides: Any):
        super().__init__(config, **overrides)
        self.layers: list[str] = list(self.config.layers)
        self.sample_index: np.ndarray | None = None
        self.sample_labels: np.ndarray | None = None
        self.steps: list[int] = []
        self.epochs: list[int] = []
        self.metrics: dict[str, list[float]] = {}  # "<layer>/<name>", "fourier_sparsity", "weight_norm" -> per snapshot
        self.acts: dict[int, dict[str, np.ndarray]] = {}  # snapshot number -> layer -> activations
        self.pca: dict[int, dict[str, np.ndarray]] = {}
        self.top_freqs: list[list[int]] = []
        self._x: torch.Tensor | None = None
        self._p: int | None = None
        self._centered: dict[int, dict[str, _Centered]] = {}  # the latest snapshot's, for the next cka_prev

    # ---- hooks ------------------------------------------------------------------------------------------
    def on_train_begin(self, state: TrainState):
        data = task_data(state)
        x, y = (data.x_test, data.y_test) if self.config.sample_split == "test" else (data.x_train, data.y_train)
        if self.sample_index is None:
            n = min(self.config.sample_size, len(y))
            self.sample_index = np.sort(np.random.default_rng(self.config.seed).choice(len(y), n, replace=False))
        idx = torch.from_numpy(self.sample_index)
        self._x = x[idx]
        self.sample_labels = y[idx].cpu().numpy()
        if not self.layers:
            self.layers = [default_feature_layer(state.model)]
        self._p = (data.meta or {}).get("p")
        return self.snapshot(state) if not self.steps else None

    def use_sample(self, x: torch.Tensor, labels, layers: list[str] | None = None) -> None:
        """Take snapshots on ``x`` (with class ``labels``) instead of a sample of the task's data.

        Why: a loop without a classification task (``FeatureEvolutionTracker`` over a user's
        DataLoader) supplies its own fixed sample; ``layers`` replaces the configured ones."""
        self._x = x
        self.sample_labels = np.asarray(torch.as_tensor(labels).cpu())
        self.sample_index = np.arange(len(self.sample_labels))
        if layers:
            self.layers = list(layers)

    def on_epoch_end(self, state: TrainState):
        self.epochs_seen += 1
        return self.snapshot(state) if self.epochs_seen % self.config.every_n_epochs == 0 else None

    def on_train_end(self, state: TrainState):
        if self._x is not None and (not self.steps or self.steps[-1] != state.step):
            return self.snapshot(state)
        return None

    # ---- one snapshot -------------------------------------------------------------------------------------
    def snapshot(self, state: TrainState) -> dict[str, float]:
        """One snapshot, on one thread (see :func:`modelxray.learning_dynamics.features.single_thread`)."""
        with single_thread():
            return self._snapshot(state)

    def _snapshot(self, state: TrainState) -> dict[str, float]:
        c = self.config
        k = len(self.steps)
        acts = capture_activations(state.model, self._x, self.layers)
        out: dict[str, float] = {}
        latest = max(self.acts) if self.acts else None
        prev = self.acts[latest] if latest is not None else None
        kept = self._centered.get(latest, {}) if latest is not None else {}
        centered_now: dict[str, _Centered] = {}
        for layer, a in acts.items():
            a64 = np.asarray(a, np.float64)  # once, for every measure below
            previous = (kept.get(layer) or _Centered(prev[layer])) if c.cka and prev is not None else None
            current = _Centered(a64) if c.cka else None

            def geometry(a64=a64, previous=previous, current=current) -> dict:
                """Silhouette, CKA to the previous snapshot and the PCA: the helper thread's half."""
                constant = is_constant(a64) if (c.silhouette or c.pca) else False
                got: dict = {
                    "silhouette": silhouette_by_class(a64, self.sample_labels, constant=constant)
                    if c.silhouette
                    else np.nan,
                    "cka_prev": previous.cka(current) if previous is not None else np.nan,
                }
                if c.pca:
                    got["pca"] = pca_projection(a64, 2, c.seed, constant=constant)
                return got

            def probe(a64=a64) -> float:
                if not c.probe:
                    return np.nan
                return linear_probe_accuracy(
                    a64, self.sample_labels, c.probe_test_fraction, c.seed, probe_max_dim=c.probe_max_dim
                )

            got, probe_accuracy = beside(geometry, probe) if c.probe else (geometry(), np.nan)
            vals = {
                "silhouette": got["silhouette"],
                "probe_accuracy": probe_accuracy,
                "cka_prev": got["cka_prev"],
                "pca_explained": np.nan,
            }
            if c.pca:
                coords, ratios = got["pca"]
                vals["pca_explained"] = float(sum(ratios))
                if c.projection == "tsne":
                    coords = tsne_projection(a64, c.seed)
                self.pca.setdefault(k, {})[layer] = coords.astype(np.float32)
            for name, v in vals.items():
                self._put(f"{layer}/{name}", k, v)
                out[f"features/{layer}/{name}"] = v
            if current is not None:
                centered_now[layer] = current
        if c.fourier:
            emb = self._embedding(state.model)
            if emb is not None:
                self._put("fourier_sparsity", k, fourier_sparsity(emb, c.fourier_top_k))
                self._put("weight_norm", k, weight_norm(state.model))
                self.top_freqs.append(top_frequencies(emb, c.fourier_top_k))
                out["features/fourier_sparsity"] = self.metrics["fourier_sparsity"][-1]
                out["features/weight_norm"] = self.metrics["weight_norm"][-1]
        self.steps.append(int(state.step))
        self.epochs.append(int(state.epoch))
        self.acts[k] = acts
        self._centered = {k: centered_now} if centered_now else {}
        self._thin()
        return finite(out)

    def _put(self, key: str, k: int, v: float) -> None:
        series = self.metrics.setdefault(key, [])
        series.extend([float("nan")] * (k - len(series)))
        series.append(float(v))

    def _thin(self) -> None:
        keys = sorted(self.acts)
        if len(keys) > self.config.max_stored_snapshots:
            for key in keys[1:-1:2]:  # keep the first and the newest
                del self.acts[key]

    def _embedding(self, model) -> torch.Tensor | None:
        fn = getattr(model, "residue_embedding", None)
        if callable(fn):
            emb = fn()
            return None if emb is None else emb.detach()
        name = self.config.embedding_param
        if name and self._p:
            return dict(model.named_parameters())[name].detach()[: int(self._p)]
        return None

    # ---- results ----------------------------------------------------------------------------------------
    def report(self) -> CallbackReport:
        if not self.steps:
            return CallbackReport(insights=["Feature evolution: no snapshot was taken."])
        final = self.acts.get(len(self.steps) - 1)
        n = len(self.steps)
        metrics: dict[str, float] = {}
        data: dict[str, Any] = {
            "steps": self.steps,
            "epochs": self.epochs,
            "layers": self.layers,
            "sample_split": self.config.sample_split,
            "sample_labels": self.sample_labels.tolist(),
            "series": {k: v + [float("nan")] * (n - len(v)) for k, v in self.metrics.items()},
        }
        cka_final: dict[str, dict[str, list]] = {}
        for layer in self.layers:
            for name in ("silhouette", "probe_accuracy", "cka_prev", "pca_explained"):
                series = self.metrics.get(f"{layer}/{name}", [])
                if series:
                    metrics[f"features/{layer}/{name}"] = series[-1]
            if final is not None and self.config.cka:
                ks = sorted(self.acts)
                last = _Centered(final[layer])  # centered and its self-similarity once, not per snapshot
                vals = [_Centered(self.acts[k][layer]).cka(last) for k in ks]
                cka_final[layer] = {"steps": [self.steps[k] for k in ks], "cka": vals}
                metrics[f"features/{layer}/cka_first_final"] = vals[0]
        data["cka_final"] = cka_final
        if "fourier_sparsity" in self.metrics:
            metrics["features/fourier_sparsity"] = self.metrics["fourier_sparsity"][-1]
            metrics["features/weight_norm"] = self.metrics["weight_norm"][-1]
            data["top_frequencies"] = self.top_freqs[-1] if self.top_freqs else []
        if self.pca:
            ks = sorted(self.pca)
            spots = np.linspace(0, len(ks) - 1, min(self.config.pca_snapshots, len(ks)))
            pick = sorted({ks[int(round(i))] for i in spots})
            data["pca"] = [
                {"step": self.steps[k], "layers": {layer: v.tolist() for layer, v in self.pca[k].items()}} for k in pick
            ]
            data["projection"] = self.config.projection
        return CallbackReport(metrics=finite(metrics), data=data, insights=self._insights(metrics))

    def _insights(self, m: dict[str, float]) -> list[str]:
        out = []
        for layer in self.layers:
            sil = self.metrics.get(f"{layer}/silhouette", [])
            probe = self.metrics.get(f"{layer}/probe_accuracy", [])
            parts = []
            if len(sil) > 1 and np.isfinite([sil[0], sil[-1]]).all():
                parts.append(f"silhouette {sil[0]:.2f} -> {sil[-1]:.2f}")
            if len(probe) > 1 and np.isfinite([probe[0], probe[-1]]).all():
                parts.append(f"linear-probe accuracy {probe[0]:.2f} -> {probe[-1]:.2f}")
            if f"features/{layer}/cka_first_final" in m:
                parts.append(f"CKA(first, final) {m[f'features/{layer}/cka_first_final']:.2f}")
            if parts:
                out.append(f"Layer {layer} over {len(self.steps)} snapshots: " + ", ".join(parts) + ".")
        fs = self.metrics.get("fourier_sparsity")
        if fs and len(fs) > 1:
            wn = self.metrics["weight_norm"]
            out.append(
                f"Embedding Fourier sparsity (top {self.config.fourier_top_k} frequencies) {fs[0]:.2f} -> "
                f"{fs[-1]:.2f}; weight norm {wn[0]:.1f} -> {wn[-1]:.1f}."
            )
        return out

    # ---- state ------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "layers": list(self.layers),
            "sample_index": self.sample_index,
            "sample_labels": self.sample_labels,
            "steps": list(self.steps),
            "epochs": list(self.epochs),
            "metrics": {k: np.asarray(v, np.float64) for k, v in self.metrics.items()},
            "acts": {str(k): v for k, v in self.acts.items()},
            "pca": {str(k): v for k, v in self.pca.items()},
            "top_freqs": [list(t) for t in self.top_freqs],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.layers = list(state["layers"])
        self.sample_index = state["sample_index"]
        self.sample_labels = state["sample_labels"]
        self.steps, self.epochs = [int(s) for s in state["steps"]], [int(e) for e in state["epochs"]]
        self.metrics = {k: [float(x) for x in v] for k, v in state["metrics"].items()}
        self.acts = {int(k): v for k, v in state["acts"].items()}
        self.pca = {int(k): v for k, v in state["pca"].items()}
        self.top_freqs = [list(t) for t in state["top_freqs"]]


class _Centered:
    """One snapshot's activations of one layer, centered (float64), with their CKA self-similarity
    once computed: the snapshot after it, and the report's CKA to the final snapshot, reuse both
    instead of centering and multiplying the same matrix again (the same numbers as
    :func:`modelxray.learning_dynamics.cka.linear_cka`)."""

    def __init__(self, acts):
        self.x = centered(acts)
        self._self: dict[bool, float] = {}

    def self_similarity(self, gram: bool) -> float:
        if gram not in self._self:
            self._self[gram] = self_similarity(self.x, gram)
        return self._self[gram]

    def cka(self, other: _Centered) -> float:
        """``linear_cka(self's activations, other's)``."""
        if self.x.shape[0] != other.x.shape[0]:
            raise ValueError(
                f"CKA needs the same examples on both sides, got {self.x.shape[0]} and {other.x.shape[0]} rows"
            )
        gram = gram_space(self.x.shape[0], self.x.shape[1], other.x.shape[1])
        return centered_cka(self.x, other.x, self.self_similarity(gram), other.self_similarity(gram))
