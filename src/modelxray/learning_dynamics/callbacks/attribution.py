"""TransitionAttributionCallback: keep checkpoints during training, and at the end rank the
training examples by their TracIn influence (:mod:`modelxray.learning_dynamics.attribution`) on what the
transition taught.

Checkpoints (parameter copies on the CPU, with the step's learning rate) are taken every
``every_n_steps`` steps between ``start_step`` and ``end_step`` (null = no bound); beyond
``max_checkpoints`` every other one is dropped (first and newest kept). At ``on_train_end`` the
target set is ``target``:

- ``learned``: test examples the final model gets right and the first checkpoint got wrong (what
  was learned across the window; falls back to the whole test set when there are none);
- ``test``: the whole (first ``max_target``) test set.

Report: ``transitions/attribution_checkpoints``, ``transitions/attribution_targets``; tables
``attribution_proponents``, ``attribution_opponents`` and ``attribution_self_influence`` (top
``top_k`` with index, label, influence, self-influence and, when an ExampleDynamicsCallback runs
too, the cartography region).
"""

from __future__ import annotations

from typing import Any

from modelxray.core.callbacks import CallbackReport, TrainState
from modelxray.learning_dynamics.attribution import TracInCheckpoint, TracInResult, learned_targets, tracin
from modelxray.learning_dynamics.callbacks.base import LearningCallback, task_data
from modelxray.learning_dynamics.callbacks.configs import TransitionAttributionConfig


class TransitionAttributionCallback(LearningCallback):
    name = "transition_attribution"
    config_class = TransitionAttributionConfig

    def __init__(self, config: TransitionAttributionConfig | dict | None = None, **overrides: Any):
        super().__init__(config, **overrides)
        self.checkpoints: list[TracInCheckpoint] = []
        self.result: TracInResult | None = None
        self.labels = None
        self.regions = None
        self.n_targets = 0

    def on_step_end(self, state: TrainState):
        c = self.config
        if (
            state.step % c.every_n_steps
            or (c.start_step is not None and state.step < c.start_step)
            or (c.end_step is not None and state.step > c.end_step)
        ):
            return None
        lr = state.lr if state.lr is not None else (state.optimizer.param_groups[0]["lr"] if state.optimizer else 1.0)
        params = {k: v.detach().to("cpu", copy=True) for k, v in state.model.state_dict().items()}
        self.checkpoints.append(TracInCheckpoint(params, float(lr), int(state.step)))
        if len(self.checkpoints) > c.max_checkpoints:
            del self.checkpoints[1:-1:2]
        return None

    def on_train_end(self, state: TrainState):
        if not self.checkpoints:
            return None
        data = task_data(state)
        self.result, self.n_targets = transition_tracin(
            state.model, self.checkpoints, data.x_train, data.y_train, data.x_test, data.y_test, self.config
        )
        n = len(self.result.influence)
        self.labels = data.y_train[:n].cpu().numpy()
        examples = state.extra.get("learning/example_dynamics") if isinstance(state.extra, dict) else None
        self.regions = examples.regions_for(range(n)) if examples is not None else None
        return None

    def report(self) -> CallbackReport:
        if self.result is None:
            return CallbackReport(
                insights=["Transition attribution: not computed (no checkpoint, or training not ended)."]
            )
        k = self.config.top_k
        tables = {
            f"attribution_{name}": self.result.top(k, by, self.labels, self.regions)
            for name, by in (
                ("proponents", "influence"),
                ("opponents", "opponents"),
                ("self_influence", "self_influence"),
            )
        }
        top = tables["attribution_self_influence"][:3]
        steps = self.result.checkpoints
        insights = [
            f"TracIn over {len(steps)} checkpoints (steps {steps[0]}-{steps[-1]}) on {self.n_targets} target "
            "examples; highest self-influence (possible mislabels): "
            + ", ".join(f"#{r['index']} (label {r.get('label')})" for r in top)
            + "."
        ]
        return CallbackReport(
            metrics={
                "transitions/attribution_checkpoints": float(len(steps)),
                "transitions/attribution_targets": float(self.n_targets),
            },
            tables=tables,
            insights=insights,
            data={"checkpoint_steps": steps},
        )

    def state_dict(self) -> dict[str, Any]:
        r = self.result
        return {
            "checkpoints": [{"params": ck.params, "lr": ck.lr, "step": ck.step} for ck in self.checkpoints],
            "result": None
            if r is None
            else {"influence": r.influence, "self_influence": r.self_influence, "checkpoints": list(r.checkpoints)},
            "labels": self.labels,
            "regions": self.regions,
            "n_targets": self.n_targets,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.checkpoints = [
            TracInCheckpoint(dict(ck["params"]), float(ck["lr"]), int(ck["step"])) for ck in state["checkpoints"]
        ]
        r = state["result"]
        self.result = None if r is None else TracInResult(r["influence"], r["self_influence"], list(r["checkpoints"]))
        self.labels, self.regions, self.n_targets = state["labels"], state["regions"], int(state["n_targets"])


def transition_tracin(
    model, checkpoints: list[TracInCheckpoint], x_train, y_train, x_test, y_test, config: TransitionAttributionConfig
) -> tuple[TracInResult, int]:
    """TracIn of the first ``config.max_train`` training examples over ``checkpoints`` on the
    ``config.target`` set (see the module docstring), with ``model`` as the final weights; returns
    the result and the number of target examples. Shared by the callback and
    ``PhaseTransitionAttributor`` (checkpoints given as ``{epoch: model}``)."""
    c = config
    x_t, y_t = x_test, y_test
    if c.target == "learned":
        pos = learned_targets(model, checkpoints[0], x_t, y_t)
        if len(pos):
            x_t, y_t = x_t[pos], y_t[pos]
    x_t, y_t = x_t[: c.max_target], y_t[: c.max_target]
    n = len(y_train) if c.max_train is None else min(c.max_train, len(y_train))
    result = tracin(model, checkpoints, x_train[:n], y_train[:n], x_t, y_t, chunk_size=c.chunk_size)
    return result, len(y_t)
