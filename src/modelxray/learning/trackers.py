"""Learning dynamics from your own training loop, DataLoaders and checkpoints: one call per batch,
one per epoch, with the names of the "Delayed Generalization" analysis API.

Why this module: the learning callbacks (:mod:`modelxray.learning.callbacks`) follow the hooks of
modelxray's training loop (a ``TrainState`` holding the task's tensors). Code written for the
``data_attribution.analysis`` API calls per-batch and per-epoch methods with its own model,
batches, DataLoaders and ``{epoch: model}`` checkpoints instead. These classes keep that API's
class, method, argument and result-key names and run the callbacks underneath, so every number
is the callbacks' (definitions in their modules); only the imports change::

    from modelxray.learning import LearningDynamicsAnalyzer

    analyzer = LearningDynamicsAnalyzer(num_classes=10)
    for epoch in range(num_epochs):
        for batch_idx, (inputs, targets) in enumerate(train_loader):
            outputs = model(inputs)
            ...
            analyzer.track_batch(model, inputs, targets, batch_indices, epoch, outputs=outputs)
        analyzer.compute_epoch_statistics(train_loader, model, epoch)
    analysis = analyzer.analyze_learning_patterns()

=============================  =========================================================  ==============================
class                          calls                                                      backed by
=============================  =========================================================  ==============================
``LearningDynamicsAnalyzer``   ``track_batch``, ``compute_epoch_statistics``,             ``ExampleDynamicsCallback``
                               ``analyze_learning_patterns``, ``plot_learning_dynamics``, (forgetting, cartography)
                               ``save`` / ``load``
``GradientFlowAnalyzer``       ``track_batch_gradients``, ``compute_epoch_statistics``,   ``GradientFlowCallback``
                               ``analyze_gradient_flow``, ``plot_gradient_flow``
``MemorizationDetector``       ``compute_memorization_scores`` (train/test DataLoaders),  ``MemorizationCallback``
                               ``analyze_memorization_evolution``, ``plot_memorization``
``FeatureEvolutionTracker``    ``track_epoch``, ``analyze_evolution``,                    ``FeatureEvolutionCallback``
                               ``detect_phase_transitions``, ``visualize_evolution``,
                               ``plot_metrics_evolution``
``PhaseTransitionAttributor``  ``compute_transition_attributions``,                       TracIn (``transition_tracin``)
                               ``find_critical_examples``, ``analyze_critical_examples``
=============================  =========================================================  ==============================

Keyword options of each class are the keys of its callback's config (defaults there), e.g.
``LearningDynamicsAnalyzer(num_classes=10, selection="random")``. Conventions:

- epochs are the caller's labels; the series and plots are indexed by them;
- every evaluation pass runs in eval mode without gradients, restores the model's mode and leaves
  torch's global random state as it found it (iterating a shuffled DataLoader draws from it);
- ``device`` arguments are accepted for the API's signatures: work runs where the model's
  parameters are;
- ``save(path)`` writes ``path.json`` + ``path.npz`` (never pickle), also for a ``.pkl`` path.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import warnings
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from modelxray.core.callbacks import TrainState
from modelxray.core.errors import ConfigError
from modelxray.learning.attribution import TracInCheckpoint, TracInResult
from modelxray.learning.callbacks.attribution import transition_tracin
from modelxray.learning.callbacks.configs import (
    ExampleDynamicsConfig,
    FeatureEvolutionConfig,
    GradientFlowConfig,
    MemorizationConfig,
    TransitionAttributionConfig,
)
from modelxray.learning.callbacks.examples import ExampleDynamicsCallback
from modelxray.learning.callbacks.features import FeatureEvolutionCallback
from modelxray.learning.callbacks.gradient_flow import GradientFlowCallback
from modelxray.learning.callbacks.memorization import MemorizationCallback
from modelxray.learning.cartography import hard_example_order
from modelxray.learning.evaluation import evaluate_loader
from modelxray.learning.gradient_flow import flow_flags, layer_of
from modelxray.learning.loaders import (
    batch_pair,
    check_targets,
    dataset_size,
    dataset_tensors,
    describe,
    is_sequential,
    logits_of,
)
from modelxray.learning.recorder import ExampleRecorder

# the seed API's feature-metric names -> the feature callback's
FEATURE_METRICS = {
    "silhouette_score": "silhouette",
    "silhouette": "silhouette",
    "probe_accuracy": "probe_accuracy",
    "cka_prev": "cka_prev",
    "pca_explained": "pca_explained",
}


# ---- shared helpers ---------------------------------------------------------------------------------
def _config(cls, owner: str, options: dict[str, Any], unused: tuple[str, ...] = (), **fixed: Any):
    """The callback config of ``owner``: the user's keyword ``options`` plus what ``owner`` sets
    itself (``fixed``). An unknown option, or one ``owner`` has no use for (``unused``: what the
    loop's arguments decide), is a ConfigError."""
    names = {f.name for f in dataclasses.fields(cls)} - set(unused) - set(fixed)
    unknown = sorted(set(options) - names)
    if unknown:
        raise ConfigError(unknown[0], f"is not an option of {owner}; options: {', '.join(sorted(names))}")
    return cls(**options, **fixed)


def _device_of(model: nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


@torch.no_grad()
def _eval_logits(model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """The model's logits on ``inputs`` in eval mode (dropout off, batch-norm statistics untouched),
    the model's mode restored."""
    was_training = model.training
    model.eval()
    try:
        return logits_of(model(inputs.to(_device_of(model))), "model output").detach()
    finally:
        model.train(was_training)


def _peek(loader, key: str) -> None:
    """Check a DataLoader's first batch before any work (random state kept)."""
    with torch.random.fork_rng(devices=[]):
        for batch in loader:
            batch_pair(batch, key)
            return
    raise ConfigError(key, "yielded no batch")


def _save_figures(figs: dict, save_dir: str | Path | None, rename: dict[str, str] | None = None) -> dict:
    """Save ``{file name: Figure}`` into ``save_dir`` (returns ``{name: path}``), or return the figures."""
    from modelxray.plotting import save

    if save_dir is None:
        return {(rename or {}).get(k, k): v for k, v in figs.items()}
    out_dir = Path(save_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, fig in figs.items():
        name = (rename or {}).get(name, name)
        save(fig, out_dir / name)
        paths[name] = out_dir / name
    return paths


def _int_or_none(v) -> int | None:
    return None if v is None or v != v else int(v)


# ---- per-example dynamics -------------------------------------------------------------------------------
class LearningDynamicsAnalyzer:
    """Forgetting and dataset cartography of the training examples, recorded batch by batch.

    ``track_batch(model, inputs, targets, batch_indices, epoch, outputs=None)`` records the batch's
    per-example loss and correctness (``batch_indices``: the examples' positions in the training
    dataset). Given ``outputs`` (the logits the loop already computed) it costs no forward; without,
    it runs one no-grad forward in eval mode. ``compute_epoch_statistics(train_loader, model, epoch)``
    closes the epoch; in an epoch without ``track_batch`` calls it records the epoch itself from one
    pass over ``train_loader`` (which must then not shuffle, so positions are known), which is how
    saved checkpoints are replayed. Only the first ``track_examples`` positions are tracked
    (``selection="random"``: a seeded random subset). ``num_classes`` None: the logits' width.
    """

    def __init__(
        self,
        num_classes: int | None = None,
        track_examples: int | None = ExampleDynamicsConfig.track_examples,
        device: Any = None,
        **options: Any,
    ):
        if num_classes is not None and (not isinstance(num_classes, int) or num_classes < 1):
            raise ConfigError("num_classes", f"must be a positive integer or None, got {num_classes!r}")
        self.num_classes = num_classes
        self.device = device
        self.config = _config(
            ExampleDynamicsConfig,
            "LearningDynamicsAnalyzer",
            options,
            ("every_n_epochs", "log_every_n_epochs"),  # every epoch the loop closes is recorded
            track_examples=track_examples,
        )
        self.callback = ExampleDynamicsCallback(self.config)
        self.epoch_stats: list[dict[str, Any]] = []
        self.current_epoch: int | None = None  # the epoch track_batch records into, until it is closed
        self._pending: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # before the size is known
        self._max_position = -1
        self._labels_complete = False

    @property
    def recorder(self) -> ExampleRecorder | None:
        return self.callback.recorder

    # ---- recording ----------------------------------------------------------------------------------
    def track_batch(
        self,
        model: nn.Module,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        batch_indices,
        epoch: int,
        outputs: Any = None,
    ) -> None:
        """Record one batch (see the class docstring). Nothing synchronises with the GPU when
        ``outputs`` are given and the indices are on the CPU."""
        targets = check_targets(targets, None, "targets")
        positions = self._positions(batch_indices, len(targets))
        logits = _eval_logits(model, inputs) if outputs is None else logits_of(outputs).detach()
        if logits.shape[0] != len(targets):
            raise ConfigError("outputs", f"has {logits.shape[0]} rows for a batch of {len(targets)} targets")
        self._check_classes(logits.shape[1])
        if self.current_epoch is not None and int(epoch) != self.current_epoch:
            self._close(None)
        self.current_epoch = int(epoch)
        self._record(logits, positions, targets)

    def _positions(self, batch_indices, n: int) -> torch.Tensor:
        pos = torch.as_tensor(batch_indices)
        if pos.dim() != 1 or pos.dtype.is_floating_point or pos.dtype == torch.bool or len(pos) != n:
            raise ConfigError(
                "batch_indices",
                f"must be the {n} dataset positions of the batch (a 1-D integer tensor), got {describe(pos)}",
            )
        pos = pos.long()
        if pos.device.type != "cpu":
            pos = pos.cpu()
        if n and int(pos.min()) < 0:
            raise ConfigError("batch_indices", f"dataset positions must be >= 0, got {int(pos.min())}")
        return pos

    def _check_classes(self, width: int) -> None:
        if self.num_classes is None:
            self.num_classes = int(width)
        elif width != self.num_classes:
            raise ConfigError("num_classes", f"is {self.num_classes} but the model gives {width} logits")

    def _record(self, logits: torch.Tensor, pos: torch.Tensor, targets: torch.Tensor) -> None:
        r = self.recorder
        if len(pos):
            self._max_position = max(self._max_position, int(pos.max()))
        if r is None:  # first epoch: kept until the dataset's size is known
            c = self.config
            if c.selection == "first" and c.track_examples is not None:
                keep = pos < c.track_examples
                if not bool(keep.all()):
                    logits, pos, targets = logits[keep.to(logits.device)], pos[keep], targets[keep.to(targets.device)]
            self._pending.append((logits, pos, targets))
            return
        if len(pos) and int(pos.max()) >= r.n_train:
            keep = pos < r.n_train
            logits, pos, targets = logits[keep.to(logits.device)], pos[keep], targets[keep.to(targets.device)]
        r.update(logits, pos, targets)
        if not self._labels_complete:
            self._fill_labels(pos, targets)

    def _fill_labels(self, pos: torch.Tensor, targets: torch.Tensor) -> None:
        """Labels of tracked examples first seen after the first epoch (the hard-examples table)."""
        r = self.recorder
        slot = np.searchsorted(r.tracked, pos.numpy())
        ok = (slot < r.n_tracked) & (r.tracked[np.minimum(slot, r.n_tracked - 1)] == pos.numpy())
        r.labels[slot[ok]] = targets.detach().cpu().numpy()[ok]
        self._labels_complete = bool((r.labels >= 0).all())

    def _build_recorder(self, train_loader) -> None:
        """Size the recorder from the dataset (or the largest position seen) and replay the first epoch."""
        n = dataset_size(train_loader) if train_loader is not None else None
        if n is None:
            n = self._max_position + 1
        elif self._max_position >= n:
            raise ConfigError(
                "batch_indices", f"position {self._max_position} is beyond the {n} examples of train_loader's dataset"
            )
        c = self.config
        labels = np.full(n, -1, np.int64)
        for _, pos, targets in self._pending:
            labels[pos.numpy()] = targets.detach().cpu().numpy()
        self.callback.recorder = ExampleRecorder(n, c.track_examples, c.selection, c.seed, c.keep_history, labels)
        for logits, pos, targets in self._pending:
            self.recorder.update(logits, pos, targets)
        self._pending = []
        self._labels_complete = bool((self.recorder.labels >= 0).all())

    def _close(self, train_loader) -> None:
        """Commit the open epoch (its label: the ``epoch`` given to track_batch)."""
        if self.recorder is None:
            self._build_recorder(train_loader)
        self.recorder.commit(self.current_epoch, self.current_epoch)
        self.callback.epochs_seen += 1
        self.current_epoch = None

    def _record_pass(self, train_loader, model: nn.Module, epoch: int) -> None:
        """Record an epoch from one no-grad pass over an unshuffled loader (positions in order)."""
        if train_loader is None or not is_sequential(train_loader):
            what = "is None" if train_loader is None else "shuffles"
            raise ConfigError(
                "train_loader",
                f"{what}, and no track_batch call recorded epoch {epoch}: call track_batch for each batch, "
                "or pass a loader without shuffling so that dataset positions are known",
            )
        start = 0
        with torch.random.fork_rng(devices=[]):
            for batch in train_loader:
                inputs, targets = batch_pair(batch, "train_loader")
                logits = _eval_logits(model, inputs)
                self._check_classes(logits.shape[1])
                self._record(logits, torch.arange(start, start + len(targets)), targets)
                start += len(targets)
        if not start:
            raise ConfigError("train_loader", "yielded no batch")
        self.current_epoch = int(epoch)

    def compute_epoch_statistics(self, train_loader, model: nn.Module, epoch: int) -> dict[str, Any]:
        """Close ``epoch``; returns its summary: ``epoch``, ``accuracy`` (share of the tracked examples
        correct at their latest record), ``avg_loss`` (their mean loss this epoch),
        ``class_accuracies`` ({class: accuracy}) and the callback's ``examples/*`` and
        ``cartography/*`` metrics."""
        if self.current_epoch is None:
            if self.recorder is None or int(epoch) not in self.recorder.epochs:
                self._record_pass(train_loader, model, epoch)
                self._close(train_loader)
        elif int(epoch) != self.current_epoch:
            raise ConfigError("epoch", f"is {epoch}, but track_batch recorded epoch {self.current_epoch}")
        else:
            self._close(train_loader)
        live = self.callback.live_metrics()
        stat = {
            "epoch": int(epoch),
            "accuracy": live["examples/correct_share"],
            "avg_loss": live["examples/mean_loss"],
            "class_accuracies": self._class_accuracies(),
        }
        self.epoch_stats.append(stat)
        return {**stat, **live}

    def _class_accuracies(self) -> dict[int, float]:
        r = self.recorder
        state, labels = r.last_state, r.labels
        k = self.num_classes or 0
        if labels.size and labels.max() >= k:
            raise ConfigError("num_classes", f"is {k} but a label is {int(labels.max())}")
        seen = ~np.isnan(state) & (labels >= 0)
        n = np.bincount(labels[seen], minlength=k)
        right = np.bincount(labels[seen], weights=state[seen], minlength=k)
        with np.errstate(invalid="ignore"):
            acc = right / n
        return {c: float(acc[c]) for c in range(k)}

    # ---- results ----------------------------------------------------------------------------------------
    def analyze_learning_patterns(self) -> dict[str, Any]:
        """Per-example patterns over the recorded epochs, by dataset position:

        - ``hard_examples`` (cartography's hard region, hardest first), ``ambiguous_examples``,
          ``easy_examples``; ``hard_examples_table`` (ranked rows with label, confidence,
          variability, forgetting events);
        - ``forgetting_statistics``: ``mean``, ``std``, ``max`` forgetting events per example,
          ``examples_with_forgetting``, ``total_events``, ``unforgettable``, ``never_learned``;
        - ``learning_speed_statistics``: ``mean_first_learned_epoch``, ``std_first_learned_epoch``,
          ``learned_examples``; ``confidence_statistics``: ``mean_confidence``, ``mean_variability``,
          ``mean_correctness``; ``region_shares``;
        - ``total_examples_tracked``, ``epochs_recorded``, ``metrics`` (the callback's report) and
          ``insights``."""
        r = self.recorder
        if r is None or not r.epochs:
            raise RuntimeError("nothing recorded yet: call track_batch and compute_epoch_statistics first")
        report = self.callback.report()
        c, f = self.callback.cartography(), r.forgetting()
        order = hard_example_order(c.confidence, c.variability, f.events)
        in_region = lambda name: [int(r.tracked[i]) for i in order if c.region[i] == name]  # noqa: E731
        epochs = np.asarray(r.epochs)
        learned = epochs[f.first_learned[f.first_learned >= 0]]
        ev = f.events
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            conf = {
                "mean_confidence": float(np.nanmean(c.confidence)),
                "mean_variability": float(np.nanmean(c.variability)),
                "mean_correctness": float(np.nanmean(c.correctness)),
            }
        return {
            "hard_examples": in_region("hard"),
            "ambiguous_examples": sorted(in_region("ambiguous")),
            "easy_examples": sorted(in_region("easy")),
            "hard_examples_table": report.tables.get("hard_examples", []),
            "forgetting_statistics": {
                "mean": float(ev.mean()) if ev.size else 0.0,
                "std": float(ev.std()) if ev.size else 0.0,
                "max": int(ev.max()) if ev.size else 0,
                "examples_with_forgetting": int((ev > 0).sum()),
                "total_events": int(ev.sum()),
                "unforgettable": int(f.unforgettable.sum()),
                "never_learned": int(f.never_learned.sum()),
            },
            "learning_speed_statistics": {
                "mean_first_learned_epoch": float(learned.mean()) if learned.size else None,
                "std_first_learned_epoch": float(learned.std()) if learned.size else None,
                "learned_examples": int(learned.size),
            },
            "confidence_statistics": conf,
            "region_shares": c.shares(),
            "total_examples_tracked": r.n_tracked,
            "epochs_recorded": r.n_epochs,
            "metrics": report.metrics,
            "insights": report.insights,
        }

    def plot_learning_dynamics(self, save_dir: str | Path | None = None) -> dict:
        """``cartography_map.png``, ``forgetting_histogram.png``, ``learning_curves_by_region.png``
        written to ``save_dir`` (returns ``{name: path}``; without ``save_dir``, ``{name: Figure}``)."""
        from modelxray.learning.plots import figures

        if self.recorder is None or not self.recorder.epochs:
            raise RuntimeError("nothing recorded yet: call track_batch and compute_epoch_statistics first")
        return _save_figures(figures({"example_dynamics": self.callback.report()}, unit="epoch"), save_dir)

    # ---- state --------------------------------------------------------------------------------------------
    def save(self, filepath: str | Path) -> tuple[Path, Path]:
        """Write the analyzer to ``filepath.json`` + ``filepath.npz`` (no pickle). An epoch still open
        (track_batch calls not yet closed by compute_epoch_statistics) is not saved."""
        from modelxray.learning.state import save_state

        if self.current_epoch is not None:
            warnings.warn(f"epoch {self.current_epoch} is still open and is not saved", stacklevel=2)
        s, k = self.epoch_stats, self.num_classes or 0
        return save_state(
            filepath,
            {
                "class": type(self).__name__,
                "num_classes": self.num_classes,
                "config": dataclasses.asdict(self.config),
                "callback": self.callback.state_dict(),
                "epoch_stats": {
                    "epoch": np.array([x["epoch"] for x in s], np.int64),
                    "accuracy": np.array([x["accuracy"] for x in s], np.float64),
                    "avg_loss": np.array([x["avg_loss"] for x in s], np.float64),
                    "class_accuracies": np.array(
                        [[x["class_accuracies"][c] for c in range(k)] for x in s], np.float64
                    ).reshape(len(s), k),
                },
            },
        )

    @classmethod
    def load(cls, filepath: str | Path) -> LearningDynamicsAnalyzer:
        """An analyzer saved by :meth:`save`, ready to record more epochs or to analyze."""
        doc = _load(filepath, cls.__name__)
        new = cls(doc["num_classes"])
        new.config = ExampleDynamicsConfig(**doc["config"])
        new.callback = ExampleDynamicsCallback(new.config)
        new.callback.load_state_dict(doc["callback"])
        if new.recorder is not None:
            new.callback.epochs_seen = new.recorder.n_epochs
            new._labels_complete = bool((new.recorder.labels >= 0).all())
        s = doc["epoch_stats"]
        new.epoch_stats = [
            {
                "epoch": int(e),
                "accuracy": float(a),
                "avg_loss": float(loss),
                "class_accuracies": {c: float(v) for c, v in enumerate(row)},
            }
            for e, a, loss, row in zip(s["epoch"], s["accuracy"], s["avg_loss"], s["class_accuracies"])
        ]
        return new


def _load(filepath: str | Path, name: str) -> dict:
    from modelxray.learning.state import load_state

    doc = load_state(filepath)
    if not isinstance(doc, dict) or doc.get("class") != name:
        found = doc.get("class") if isinstance(doc, dict) else type(doc).__name__
        raise ConfigError(str(filepath), f"holds a {found}, not a {name}")
    return doc


# ---- gradient flow -------------------------------------------------------------------------------------------
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
        from modelxray.learning.plots import figures

        if not self.measured:
            raise RuntimeError("no gradients measured yet: call track_batch_gradients first")
        report = self.callback.report()
        per_epoch = max(b for _, b in self.measured) + 1
        data = {**report.data, "steps": [e + b / per_epoch for e, b in self.measured]}
        return _save_figures(figures({"gradient_flow": {**vars(report), "data": data}}, unit="epoch"), save_dir)


# ---- memorization -------------------------------------------------------------------------------------------
class MemorizationDetector:
    """Train vs test accuracy and loss over epochs from your DataLoaders, and when the gap between
    them opens and closes.

    ``compute_memorization_scores(model, train_loader, test_loader, epoch)`` evaluates both loaders
    (no gradients, eval mode) and returns ``train_accuracy``, ``test_accuracy``, ``train_loss``,
    ``test_loss``, ``gap_accuracy``, ``gap_loss`` and ``memorization_score`` (= ``gap_accuracy``,
    train minus test accuracy: positive when the model does better on what it trained on)."""

    def __init__(self, num_classes: int | None = None, device: Any = None, **options: Any):
        self.num_classes = num_classes
        self.device = device
        unused = ("every_n_epochs", "max_train_eval", "max_test_eval", "batch_size")  # the loaders decide
        self.config = _config(MemorizationConfig, "MemorizationDetector", options, unused)
        self.callback = MemorizationCallback(self.config)
        self.epoch_memorization: list[dict[str, Any]] = []
        self._checked = False

    def compute_memorization_scores(self, model: nn.Module, train_loader, test_loader, epoch: int) -> dict[str, Any]:
        if not self._checked:  # both loaders' structure, before any forward
            _peek(train_loader, "train_loader")
            _peek(test_loader, "test_loader")
            self._checked = True
        with torch.random.fork_rng(devices=[]):
            tr = evaluate_loader(model, train_loader, "train_loader", self.num_classes)
            te = evaluate_loader(model, test_loader, "test_loader", self.num_classes)
        self.callback.record(int(epoch), int(epoch), tr, te)
        s = {k: v[-1] for k, v in self.callback.series.items()}
        out = {
            "epoch": int(epoch),
            "train_accuracy": s["train_accuracy"],
            "test_accuracy": s["test_accuracy"],
            "train_loss": s["train_loss"],
            "test_loss": s["test_loss"],
            "gap_accuracy": s["gap_accuracy"],
            "gap_loss": s["gap_loss"],
            "memorization_score": s["gap_accuracy"],
        }
        self.epoch_memorization.append(out)
        return out

    def analyze_memorization_evolution(self) -> dict[str, Any]:
        """Over the evaluated epochs:

        - ``transition_epoch``: where the accuracy gap closed (stays <= ``gap_close`` to the end after
          having opened >= ``gap_open``): memorization giving way to generalization; None if it did not;
        - ``gap_open_epoch``; ``max_memorization`` and ``max_memorization_epoch``;
          ``final_memorization``; ``memorization_reduction`` (max minus final);
        - ``train_transition_epoch`` / ``test_transition_epoch``: first epoch the accuracy reaches
          ``transition_level`` and stays; ``delay_epochs`` (test minus train: the grokking delay);
        - ``change_points`` (rows: metric, epoch, before, after, jump), ``epochs_tracked``."""
        if not self.callback.steps:
            raise RuntimeError("nothing evaluated yet: call compute_memorization_scores first")
        report = self.callback.report()
        m = report.metrics
        mx, final = m.get("memorization/max_gap"), m.get("memorization/gap_accuracy")
        rows = [
            {**{k: v for k, v in r.items() if k != "step"}, "epoch": r["step"]} for r in report.tables["change_points"]
        ]
        return {
            "transition_epoch": _int_or_none(m.get("memorization/gap_close_step")),
            "gap_open_epoch": _int_or_none(m.get("memorization/gap_open_step")),
            "max_memorization": mx,
            "max_memorization_epoch": _int_or_none(m.get("memorization/max_gap_step")),
            "final_memorization": final,
            "memorization_reduction": None if mx is None or final is None else mx - final,
            "train_transition_epoch": _int_or_none(m.get("transitions/train_accuracy/step")),
            "test_transition_epoch": _int_or_none(m.get("transitions/test_accuracy/step")),
            "delay_epochs": _int_or_none(m.get("transitions/delay_steps")),
            "change_points": rows,
            "epochs_tracked": len(self.callback.steps),
        }

    def plot_memorization(self, save_dir: str | Path | None = None) -> dict:
        """``memorization.png``: train vs test accuracy over epochs with the transitions marked."""
        from modelxray.learning.plots import figures

        if not self.callback.steps:
            raise RuntimeError("nothing evaluated yet: call compute_memorization_scores first")
        return _save_figures(figures({"memorization": self.callback.report()}, unit="epoch"), save_dir)

    def save(self, filepath: str | Path) -> tuple[Path, Path]:
        """Write the detector to ``filepath.json`` + ``filepath.npz`` (no pickle)."""
        from modelxray.learning.state import save_state

        return save_state(
            filepath,
            {
                "class": type(self).__name__,
                "num_classes": self.num_classes,
                "config": dataclasses.asdict(self.config),
                "callback": self.callback.state_dict(),
                "epoch_memorization": self.epoch_memorization,
            },
        )

    @classmethod
    def load(cls, filepath: str | Path) -> MemorizationDetector:
        doc = _load(filepath, cls.__name__)
        new = cls(doc["num_classes"])
        new.config = MemorizationConfig(**doc["config"])
        new.callback = MemorizationCallback(new.config)
        new.callback.load_state_dict(doc["callback"])
        new.epoch_memorization = doc["epoch_memorization"]
        return new


# ---- feature evolution -------------------------------------------------------------------------------------------
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
        (:func:`modelxray.learning.transitions.change_points`; ``options`` are its keywords, e.g.
        ``min_gain``), in epoch order. A series needs at least 4 snapshots."""
        from modelxray.learning.transitions import change_points

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
        """``feature_pca_<layer>.png``: 2-D PCA of the layer's activations at up to ``pca_snapshots``
        evenly spaced snapshots, coloured by class."""
        from modelxray.learning.plots import _features

        if method != "pca":
            raise ConfigError("method", f"must be pca, got {method!r}")
        figs = _features(self._layer_data(layer_name), {}, {}, unit="epoch")
        return _keep(figs, "feature_pca.png", f"feature_pca_{layer_name}.png", save_dir)

    def plot_metrics_evolution(self, layer_name: str, save_dir: str | Path | None = None) -> dict:
        """``feature_metrics_<layer>.png``: silhouette, probe accuracy, CKA to the previous and final
        snapshot over epochs (with Fourier sparsity and weight norm for modular models)."""
        from modelxray.learning.plots import _features

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


# ---- transition attribution -------------------------------------------------------------------------------
class PhaseTransitionAttributor:
    """Which training examples drove a transition, from ``{epoch: model}`` checkpoints: TracIn
    (:mod:`modelxray.learning.attribution`) summed over the checkpoints from the pre- to the
    post-transition epoch, on the test examples the post-transition model gets right and the
    pre-transition one got wrong (``target="test"``: the whole test set).

    ``train_data`` / ``test_data``: datasets (or DataLoaders) of ``(input tensor, label)`` pairs,
    stacked once. ``learning_rate`` weighs every checkpoint alike (TracIn's step size: it scales
    the scores, not their order)."""

    def __init__(
        self,
        model_checkpoints: Mapping[int, nn.Module],
        train_data,
        test_data,
        device: Any = None,
        learning_rate: float = 1.0,
        **options: Any,
    ):
        self.model_checkpoints = self._check_checkpoints(model_checkpoints)
        if not learning_rate > 0:
            raise ConfigError("learning_rate", f"must be positive, got {learning_rate}")
        self.device = device
        self.learning_rate = float(learning_rate)
        unused = ("every_n_steps", "start_step", "end_step", "max_checkpoints")  # the checkpoints are given
        self.config = _config(TransitionAttributionConfig, "PhaseTransitionAttributor", options, unused)
        self.x_train, self.y_train = dataset_tensors(train_data, "train_data")
        self.x_test, self.y_test = dataset_tensors(test_data, "test_data")
        self.result: TracInResult | None = None
        self.n_targets = 0

    @staticmethod
    def _check_checkpoints(ckpts) -> dict[int, nn.Module]:
        if not isinstance(ckpts, Mapping) or len(ckpts) < 2:
            raise ConfigError("model_checkpoints", f"must map at least two epochs to models, got {describe(ckpts)}")
        out = {}
        keys = None
        for epoch, model in sorted(ckpts.items()):
            if not isinstance(model, nn.Module):
                raise ConfigError("model_checkpoints", f"epoch {epoch} maps to {describe(model)}, not a model")
            k = {name: tuple(t.shape) for name, t in model.state_dict().items()}
            if keys is not None and k != keys:
                odd = sorted(n for n in k.keys() | keys.keys() if k.get(n) != keys.get(n))[:3]
                raise ConfigError("model_checkpoints", f"epoch {epoch} has another architecture (differs in {odd})")
            keys = k
            out[int(epoch)] = model
        return out

    def compute_transition_attributions(
        self, pre_transition_epoch: int, post_transition_epoch: int, method: str = "tracin"
    ) -> dict[int, float]:
        """``{training position: influence}`` across the transition: positive for examples whose
        training steps lowered the loss of what the transition taught (proponents)."""
        if method != "tracin":
            raise ConfigError("method", f"must be tracin, got {method!r}")
        have = sorted(self.model_checkpoints)
        for key, e in (
            ("pre_transition_epoch", pre_transition_epoch),
            ("post_transition_epoch", post_transition_epoch),
        ):
            if e not in self.model_checkpoints:
                raise ConfigError(key, f"no checkpoint for epoch {e}; checkpoints: {have}")
        if post_transition_epoch <= pre_transition_epoch:
            raise ConfigError("post_transition_epoch", f"must come after pre_transition_epoch {pre_transition_epoch}")
        epochs = [e for e in have if pre_transition_epoch <= e <= post_transition_epoch]
        checkpoints = [
            TracInCheckpoint(
                {k: v.detach() for k, v in self.model_checkpoints[e].state_dict().items()}, self.learning_rate, e
            )
            for e in epochs
        ]
        self.result, self.n_targets = transition_tracin(
            self.model_checkpoints[post_transition_epoch],
            checkpoints,
            self.x_train,
            self.y_train,
            self.x_test,
            self.y_test,
            self.config,
        )
        return {i: float(v) for i, v in enumerate(self.result.influence)}

    @staticmethod
    def find_critical_examples(
        attributions: Mapping[int, float], top_k: int = 100, method: str = "highest"
    ) -> list[int]:
        """The ``top_k`` training positions with the highest (``lowest``: most negative) attribution."""
        if method not in ("highest", "lowest"):
            raise ConfigError("method", f"must be highest or lowest, got {method!r}")
        if top_k < 1:
            raise ConfigError("top_k", f"must be positive, got {top_k}")
        items = sorted(attributions.items(), key=lambda kv: (-kv[1] if method == "highest" else kv[1], kv[0]))
        return [int(i) for i, _ in items[:top_k]]

    def analyze_critical_examples(self, critical_indices: list[int]) -> dict[str, Any]:
        """``num_examples``, ``label_distribution`` ({label: count}, by label), ``label_share``
        beside ``train_label_share`` (the whole training set's: the base rate to compare with),
        ``most_common_label``, and, after ``compute_transition_attributions``, ``mean_influence``
        and ``mean_self_influence`` of these examples."""
        idx = np.asarray(list(critical_indices), np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self.y_train)):
            raise ConfigError("critical_indices", f"must be training positions in [0, {len(self.y_train)})")
        labels = self.y_train.numpy()[idx]
        counts = Counter(int(v) for v in labels)
        all_counts = Counter(int(v) for v in self.y_train.numpy())
        n = max(len(idx), 1)
        out: dict[str, Any] = {
            "num_examples": int(len(idx)),
            "label_distribution": dict(sorted(counts.items())),
            "label_share": {k: v / n for k, v in sorted(counts.items())},
            "train_label_share": {k: v / len(self.y_train) for k, v in sorted(all_counts.items())},
            "most_common_label": counts.most_common(1)[0][0] if counts else None,
        }
        if self.result is not None and idx.size:
            out["mean_influence"] = float(self.result.influence[idx].mean())
            out["mean_self_influence"] = float(self.result.self_influence[idx].mean())
        return out
