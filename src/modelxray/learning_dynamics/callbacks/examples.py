"""ExampleDynamicsCallback: forgetting and dataset cartography of the training examples, from the
training forward's logits (``state.logits``, ``state.indices``; no second pass).

Metrics (returned at the end of every ``log_every_n_epochs``-th recorded epoch; final values in the report):

- ``examples/forgetting_events_total``: forgetting events so far (correct -> wrong), tracked examples;
- ``examples/forgotten_share``: share with at least one forgetting event;
- ``examples/unforgettable_share``: learned and never forgotten; ``examples/never_learned_share``;
- ``examples/correct_share``: correct at their latest recorded epoch; ``examples/mean_loss``: mean
  training loss of the tracked examples in the last recorded epoch;
- ``cartography/easy_share``, ``cartography/ambiguous_share``, ``cartography/hard_share``,
  ``cartography/mean_confidence``, ``cartography/mean_variability``, ``cartography/mean_correctness``.

Report only: ``examples/tracked``, ``examples/epochs_recorded``, ``examples/mean_first_learned_epoch``;
tables ``hard_examples`` (ranked, hardest first) and ``forgetting_histogram``; data ``cartography``
(per example), ``curves`` (mean true-class probability and accuracy per recorded epoch by region).
Definitions: :mod:`modelxray.learning_dynamics.forgetting` and :mod:`modelxray.learning_dynamics.cartography`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from modelxray.core.callbacks import CallbackReport, TrainState
from modelxray.learning_dynamics.callbacks.base import LearningCallback, finite, task_data
from modelxray.learning_dynamics.callbacks.configs import ExampleDynamicsConfig
from modelxray.learning_dynamics.cartography import (
    REGIONS,
    Cartography,
    cartography_from_sums,
    hard_example_order,
)
from modelxray.learning_dynamics.forgetting import ForgettingStats, forgetting_histogram
from modelxray.learning_dynamics.recorder import ExampleRecorder, PerIndices


class ExampleDynamicsCallback(LearningCallback):
    name = "example_dynamics"
    config_class = ExampleDynamicsConfig
    extra_key = "learning/example_dynamics"

    def __init__(self, config: ExampleDynamicsConfig | dict | None = None, **overrides: Any):
        super().__init__(config, **overrides)
        self.recorder: ExampleRecorder | None = None
        self._y = None  # the training labels on the logits' device
        self._batch_y = PerIndices()

    # ---- hooks -------------------------------------------------------------------------------------------
    def on_train_begin(self, state: TrainState):
        self._publish(state)
        if self.recorder is None:  # a loaded callback resumes with its recorder
            y = task_data(state).y_train
            c = self.config
            self.recorder = ExampleRecorder(
                len(y), c.track_examples, c.selection, c.seed, c.keep_history, labels=y.cpu().numpy()
            )
        return None

    def on_step_end(self, state: TrainState):
        if (
            self.recorder is not None
            and state.logits is not None
            and state.indices is not None
            and self._due(self.config.every_n_epochs)
        ):
            self.recorder.update(state.logits, state.indices, self._batch_labels(state), loss=state.example_loss)
        return None

    def _batch_labels(self, state: TrainState):
        """The batch's labels on the logits' device: the training labels are moved there once, and
        gathered again only when the indices tensor changes."""
        device = state.logits.device
        if self._y is None or self._y.device != device:
            self._y, self._batch_y = task_data(state).y_train.to(device), PerIndices()
        return self._batch_y.get(state.indices, lambda: self._y[state.indices.to(device).long()])

    def on_epoch_end(self, state: TrainState):
        due = self._due(self.config.every_n_epochs)
        self.epochs_seen += 1
        if self.recorder is None or not due or not self.recorder.commit(state.epoch, state.step):
            return None
        if (self.recorder.n_epochs - 1) % self.config.log_every_n_epochs:
            return None
        return finite(self.live_metrics())

    # ---- results ----------------------------------------------------------------------------------------
    def live_metrics(self) -> dict[str, float]:
        """The per-epoch metrics, from running statistics only (O(tracked examples))."""
        r = self.recorder
        f = r.forgetting()
        carto = cartography_from_sums(r.count, r.sum_p, r.sum_p2, r.sum_correct, self.config.thresholds)
        return {
            **self._forgetting_metrics(f),
            "examples/correct_share": r.currently_correct_share(),
            "examples/mean_loss": r.last_epoch_mean_loss(),
            **self._cartography_metrics(carto),
        }

    @staticmethod
    def _forgetting_metrics(f: ForgettingStats) -> dict[str, float]:
        n = max(len(f.events), 1)
        return {
            "examples/forgetting_events_total": float(f.total_events),
            "examples/forgotten_share": float((f.events > 0).sum()) / n,
            "examples/unforgettable_share": float(f.unforgettable.sum()) / n,
            "examples/never_learned_share": float(f.never_learned.sum()) / n,
        }

    @staticmethod
    def _cartography_metrics(c: Cartography) -> dict[str, float]:
        shares = c.shares()
        with np.errstate(all="ignore"):
            mean = lambda a: float(np.nanmean(a)) if np.isfinite(a).any() else float("nan")  # noqa: E731
            return {
                **{f"cartography/{r}_share": shares[r] for r in REGIONS},
                "cartography/mean_confidence": mean(c.confidence),
                "cartography/mean_variability": mean(c.variability),
                "cartography/mean_correctness": mean(c.correctness),
            }

    def cartography(self) -> Cartography:
        return self.recorder.cartography(self.config.thresholds)

    def regions_for(self, indices) -> list[str | None]:
        """Cartography region of each dataset position (None for untracked ones)."""
        if self.recorder is None or not self.recorder.epochs:
            return [None] * len(indices)
        regions = self.cartography().region
        slot = {int(i): k for k, i in enumerate(self.recorder.tracked)}
        return [str(regions[slot[int(i)]]) if int(i) in slot else None for i in np.asarray(indices)]

    def report(self) -> CallbackReport:
        r = self.recorder
        if r is None or not r.epochs:
            return CallbackReport(insights=["Example dynamics: no epoch was recorded."])
        f = r.forgetting()
        c = self.cartography()
        epochs = np.asarray(r.epochs)
        first_epoch = np.where(f.first_learned >= 0, epochs[np.maximum(f.first_learned, 0)], -1)
        metrics = {
            **self._forgetting_metrics(f),
            **self._cartography_metrics(c),
            "examples/correct_share": r.currently_correct_share(),
            "examples/mean_loss": r.last_epoch_mean_loss(),
            "examples/tracked": float(r.n_tracked),
            "examples/epochs_recorded": float(r.n_epochs),
            "examples/mean_first_learned_epoch": float(first_epoch[first_epoch >= 0].mean())
            if (first_epoch >= 0).any()
            else float("nan"),
        }
        labels = r.labels if r.labels is not None else np.full(r.n_tracked, -1)
        order = hard_example_order(c.confidence, c.variability, f.events)[: self.config.n_hard]
        hard = [
            {
                "rank": k + 1,
                "index": int(r.tracked[i]),
                "label": int(labels[i]),
                "confidence": float(c.confidence[i]),
                "variability": float(c.variability[i]),
                "correctness": float(c.correctness[i]),
                "forgetting_events": int(f.events[i]),
                "first_learned_epoch": int(first_epoch[i]),
                "region": str(c.region[i]),
            }
            for k, i in enumerate(order)
        ]
        data: dict[str, Any] = {
            "thresholds": {
                "ambiguous_variability": self.config.ambiguous_variability,
                "easy_confidence": self.config.easy_confidence,
                "ambiguous_top_share": self.config.ambiguous_top_share,
                "variability": "population std (ddof=0)",
            },
            "cartography": {
                "index": r.tracked.tolist(),
                "label": labels.tolist(),
                "confidence": c.confidence.tolist(),
                "variability": c.variability.tolist(),
                "correctness": c.correctness.tolist(),
                "region": c.region.tolist(),
                "forgetting_events": f.events.tolist(),
                "first_learned_epoch": first_epoch.tolist(),
            },
            "epochs": r.epochs,
            "steps": r.steps,
        }
        if r.keep_history:
            data["curves"] = self._curves_by_region(r.history(), c)
        return CallbackReport(
            metrics=finite(metrics),
            data=data,
            insights=self._insights(metrics, hard),
            tables={"hard_examples": hard, "forgetting_histogram": forgetting_histogram(f.events, f.never_learned)},
        )

    @staticmethod
    def _curves_by_region(h: dict[str, np.ndarray], c: Cartography) -> dict[str, Any]:
        import warnings

        curves: dict[str, Any] = {}
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an epoch where no example of a region was seen
            for region in REGIONS:
                m = c.region == region
                if m.any():
                    curves[region] = {
                        "p_true": np.nanmean(h["p_true"][m], axis=0).tolist(),
                        "accuracy": np.nanmean(h["correct"][m], axis=0).tolist(),
                    }
        return curves

    @staticmethod
    def _insights(m: dict[str, float], hard: list[dict]) -> list[str]:
        out = [
            f"Of {int(m['examples/tracked'])} tracked training examples over {int(m['examples/epochs_recorded'])} "
            f"recorded epochs, {m['examples/unforgettable_share']:.0%} were learned and never forgotten, "
            f"{m['examples/forgotten_share']:.0%} were forgotten at least once "
            f"({int(m['examples/forgetting_events_total'])} forgetting events) and "
            f"{m['examples/never_learned_share']:.0%} were never learned."
        ]
        out.append(
            f"Cartography: {m['cartography/easy_share']:.0%} easy, {m['cartography/ambiguous_share']:.0%} "
            f"ambiguous, {m['cartography/hard_share']:.0%} hard."
        )
        if hard and hard[0]["region"] == "hard":
            ids = ", ".join(str(h["index"]) for h in hard[:5])
            out.append(f"Hardest examples (lowest confidence): {ids}; check their labels.")
        return out

    # ---- state ------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"recorder": None if self.recorder is None else self.recorder.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.recorder = None if state["recorder"] is None else ExampleRecorder.from_state_dict(state["recorder"])
