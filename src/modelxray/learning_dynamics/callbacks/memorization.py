"""MemorizationCallback: train vs test accuracy and loss over training, the gap, the steps where it
opens and closes, transition steps, and how noisy (flipped) labels are fitted.

After every ``every_n_epochs``-th epoch (and once at ``on_train_begin``) it evaluates the current weights in
eval mode without gradients (:func:`modelxray.learning_dynamics.evaluation.evaluate`) on the train split
(its first ``max_train_eval`` examples) and the test split. Metrics at each evaluation:

- ``memorization/train_accuracy``, ``memorization/test_accuracy``, ``memorization/train_loss``,
  ``memorization/test_loss``, ``memorization/gap_accuracy`` (train - test),
  ``memorization/gap_loss`` (test - train);
- with ``data.meta["flipped"]`` (noisy labels): ``memorization/flipped_fitted_share`` (flipped
  examples predicted as their wrong training label) and ``memorization/clean_fitted_share``.

Report only: ``memorization/gap_open_step``, ``memorization/gap_close_step``, ``memorization/max_gap``,
``memorization/max_gap_step``; ``transitions/train_accuracy/step`` and ``transitions/test_accuracy/step``
(first step the accuracy reaches ``transition_level`` and stays), ``transitions/delay_steps`` (test
minus train: the grokking delay), change points of the accuracy and gap series (table
``change_points``); with noisy labels and an :class:`ExampleDynamicsCallback` in the same run,
``memorization/flipped_hard_recall`` / ``_precision`` / ``_jaccard``: how well cartography's hard region
finds the flipped examples. Definitions: :mod:`modelxray.learning_dynamics.memorization`,
:mod:`modelxray.learning_dynamics.transitions`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from modelxray.core.callbacks import CallbackReport, TrainState
from modelxray.learning_dynamics.callbacks.base import LearningCallback, finite, task_data
from modelxray.learning_dynamics.callbacks.configs import MemorizationConfig
from modelxray.learning_dynamics.evaluation import EvalResult, evaluate
from modelxray.learning_dynamics.memorization import fitted_share, gap_events, region_overlap
from modelxray.learning_dynamics.transitions import detect_transitions, transition_step

SERIES = (
    "train_accuracy",
    "test_accuracy",
    "train_loss",
    "test_loss",
    "gap_accuracy",
    "gap_loss",
    "flipped_fitted_share",
    "clean_fitted_share",
)


class MemorizationCallback(LearningCallback):
    name = "memorization"
    config_class = MemorizationConfig

    def __init__(self, config: MemorizationConfig | dict | None = None, **overrides: Any):
        super().__init__(config, **overrides)
        self.steps: list[int] = []
        self.epochs: list[int] = []
        self.series: dict[str, list[float]] = {k: [] for k in SERIES}
        self.flipped: np.ndarray | None = None
        self.overlap: dict[str, float] | None = None  # flipped vs cartography's hard region, fixed at train end
        self._extra: dict | None = None

    def on_train_begin(self, state: TrainState):
        data = task_data(state)
        flipped = (data.meta or {}).get("flipped")
        self.flipped = None if flipped is None else np.asarray(torch.as_tensor(flipped).cpu(), np.int64)
        self._extra = state.extra if isinstance(state.extra, dict) else None
        if not self.steps:
            return self._measure(state)
        return None

    def on_epoch_end(self, state: TrainState):
        """After every ``every_n_epochs``-th epoch (in a full-batch run: at steps N, 2N, ..., where an
        ``eval_every`` of N evaluates the same weights and the two share one pass)."""
        self.epochs_seen += 1
        return self._measure(state) if self.epochs_seen % self.config.every_n_epochs == 0 else None

    def on_train_end(self, state: TrainState):
        self.overlap = self._flipped_overlap()
        return None

    def _measure(self, state: TrainState) -> dict[str, float]:
        data, c = task_data(state), self.config
        n_tr = len(data.y_train) if c.max_train_eval is None else min(c.max_train_eval, len(data.y_train))
        n_te = len(data.y_test) if c.max_test_eval is None else min(c.max_test_eval, len(data.y_test))
        shared = getattr(state.task, "evaluate_split", None)  # shares the loop's eval/ pass at the same weights
        if shared is not None:
            tr = shared(state.model, "train", n_tr, c.batch_size)
            te = shared(state.model, "test", n_te, c.batch_size)
        else:
            tr = evaluate(state.model, data.x_train[:n_tr], data.y_train[:n_tr], c.batch_size)
            te = evaluate(state.model, data.x_test[:n_te], data.y_test[:n_te], c.batch_size)
        return self.record(state.step, state.epoch, tr, te, data.y_train[:n_tr])

    def record(self, step: int, epoch: int, tr: EvalResult, te: EvalResult, y_train=None) -> dict[str, float]:
        """Add one evaluation (train and test results of the same weights) to the series; returns its
        metrics. Why public: a loop that evaluates its own DataLoaders (``MemorizationDetector``)
        records through here, so the gap and fitted-share definitions stay in one place.
        ``y_train``: the training labels in ``tr``'s order, needed only with flipped labels."""
        m = {
            "train_accuracy": tr.accuracy,
            "test_accuracy": te.accuracy,
            "train_loss": tr.loss,
            "test_loss": te.loss,
            "gap_accuracy": tr.accuracy - te.accuracy,
            "gap_loss": te.loss - tr.loss,
            "flipped_fitted_share": float("nan"),
            "clean_fitted_share": float("nan"),
        }
        if self.flipped is not None and y_train is not None:
            pred, y = tr.predictions.numpy(), np.asarray(torch.as_tensor(y_train).cpu())
            n_tr = len(y)
            flipped = self.flipped[self.flipped < n_tr]
            clean = np.setdiff1d(np.arange(n_tr), flipped)
            m["flipped_fitted_share"] = fitted_share(pred, y, flipped)
            m["clean_fitted_share"] = fitted_share(pred, y, clean)
        self.steps.append(int(step))
        self.epochs.append(int(epoch))
        for k in SERIES:
            self.series[k].append(float(m[k]))
        return finite({f"memorization/{k}": v for k, v in m.items()})

    def report(self) -> CallbackReport:
        if not self.steps:
            return CallbackReport(insights=["Memorization: nothing was evaluated."])
        c = self.config
        s = {k: np.asarray(v, np.float64) for k, v in self.series.items()}
        ev = gap_events(self.steps, s["gap_accuracy"], c.gap_open, c.gap_close)
        metrics: dict[str, Any] = {f"memorization/{k}": float(v[-1]) for k, v in s.items()}
        metrics.update(
            {
                "memorization/gap_open_step": ev.open_step,
                "memorization/gap_close_step": ev.close_step,
                "memorization/max_gap": ev.max_gap,
                "memorization/max_gap_step": ev.max_gap_step,
            }
        )
        names = ["train_accuracy", "test_accuracy", "gap_accuracy"]
        if self.flipped is not None:
            names.append("flipped_fitted_share")
        levels = {"train_accuracy": c.transition_level, "test_accuracy": c.transition_level}
        if c.change_points:
            found = detect_transitions(
                {k: (self.steps, s[k]) for k in names}, levels=levels, method=c.change_point_method, min_gain=c.min_gain
            )
        else:
            found = {
                "metrics": {f"transitions/{k}/step": transition_step(s[k], self.steps, lv) for k, lv in levels.items()},
                "change_points": [],
            }
        tm = found["metrics"]
        metrics.update(tm)
        t_train, t_test = tm.get("transitions/train_accuracy/step"), tm.get("transitions/test_accuracy/step")
        if t_train is not None and t_test is not None:
            metrics["transitions/delay_steps"] = float(t_test - t_train)
        overlap = self._flipped_overlap() or self.overlap
        if overlap is not None:
            metrics.update(
                {f"memorization/flipped_hard_{k}": v for k, v in overlap.items() if k != "n_flipped_tracked"}
            )
        data: dict[str, Any] = {
            "steps": self.steps,
            "epochs": self.epochs,
            "series": {k: v for k, v in self.series.items() if np.isfinite(np.asarray(v)).any()},
            "transition_level": c.transition_level,
            "gap_events": {"open_step": ev.open_step, "close_step": ev.close_step},
        }
        if self.flipped is not None:
            data["n_flipped"] = int(len(self.flipped))
        return CallbackReport(
            metrics=finite(metrics),
            tables={"change_points": found["change_points"]},
            data=data,
            insights=self._insights(metrics, ev, overlap),
        )

    def _flipped_overlap(self) -> dict[str, float] | None:
        examples = (self._extra or {}).get("learning/example_dynamics")
        if self.flipped is None or examples is None or examples.recorder is None or not examples.recorder.epochs:
            return None
        return region_overlap(self.flipped, examples.recorder.tracked, examples.cartography().region, "hard")

    def _insights(self, m: dict[str, Any], ev, overlap) -> list[str]:
        lv = self.config.transition_level
        out = [
            f"Final train accuracy {m['memorization/train_accuracy']:.3f}, test {m['memorization/test_accuracy']:.3f} "
            f"(gap {m['memorization/gap_accuracy']:+.3f})."
        ]
        t_tr, t_te = m.get("transitions/train_accuracy/step"), m.get("transitions/test_accuracy/step")
        if t_tr is not None and t_te is not None and t_te > t_tr:
            factor = t_te / t_tr if t_tr > 0 else float("inf")
            ratio = f", {factor:.1f}x later" if t_tr > 0 else ""
            verdict = (
                "delayed generalization (grokking)"
                if factor >= 3
                else "test follows train closely: ordinary generalization"
            )
            out.append(
                f"Train accuracy reached {lv:.0%} at step {int(t_tr)}, test accuracy at step {int(t_te)} "
                f"({int(t_te - t_tr)} steps{ratio}): {verdict}."
            )
        elif t_tr is not None and t_te is None:
            out.append(f"Train accuracy reached {lv:.0%} at step {int(t_tr)}; test accuracy never did.")
        if ev.open_step is not None:
            close = f", closed at step {ev.close_step}" if ev.close_step is not None else ", still open at the end"
            out.append(
                f"The train/test accuracy gap opened (>= {self.config.gap_open:g}) at step {ev.open_step}"
                f"{close}; largest {ev.max_gap:.3f} at step {ev.max_gap_step}."
            )
        if self.flipped is not None:
            share = m.get("memorization/flipped_fitted_share")
            if share is not None:
                out.append(
                    f"{share:.0%} of the {len(self.flipped)} flipped training labels are fitted (memorized) at the end."
                )
            if overlap is not None and overlap["recall"] == overlap["recall"]:
                out.append(
                    f"Cartography's hard region holds {overlap['recall']:.0%} of the tracked flipped examples "
                    f"({overlap['precision']:.0%} of the hard region is flipped)."
                )
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "steps": list(self.steps),
            "epochs": list(self.epochs),
            "series": {k: np.asarray(v, np.float64) for k, v in self.series.items()},
            "flipped": self.flipped,
            "overlap": self.overlap,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps, self.epochs = [int(s) for s in state["steps"]], [int(e) for e in state["epochs"]]
        self.series = {k: [float(x) for x in v] for k, v in state["series"].items()}
        self.flipped = None if state["flipped"] is None else np.asarray(state["flipped"], np.int64)
        self.overlap = state.get("overlap")
