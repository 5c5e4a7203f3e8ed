"""The dynamics monitor as a callback of the training loop, keeping every measurement for the report.

The loop logs what ``on_step_end`` returns at its step, so MLflow charts each ``param_change/``,
``sparse/``, ``grad/`` and ``optim/`` metric over steps; ``report()`` turns the kept history into
the tables, series and insight sentences of the run's report.
"""

from __future__ import annotations

from modelxray.core.callbacks import Callback, CallbackReport, TrainState
from modelxray.training_dynamics.config import DynamicsConfig
from modelxray.training_dynamics.monitor import DynamicsMonitor
from modelxray.training_dynamics.naming import fmt_threshold

_HEADLINE = (
    "param_change/relative_l2",
    "param_change/norm_l2",
    "param_change/mean_abs_delta",
    "grad/global_norm",
    "optim/effective_step_mean",
)


class TrainingDynamicsCallback(Callback):
    name = "dynamics"

    def __init__(self, config: DynamicsConfig, monitor: DynamicsMonitor | None = None):
        self.monitor = monitor or DynamicsMonitor.create(config)
        self.history: list[dict[str, float]] = []  # one row per measurement: {"step": s, metric: value}

    def on_train_begin(self, state: TrainState) -> None:
        if self.monitor.probe is None:
            self.monitor.probe = state.probe
        self.monitor.start(state.model, step=state.step)

    def on_step_end(self, state: TrainState) -> dict[str, float] | None:
        final = state.step >= state.max_steps
        metrics = self.monitor.on_optimizer_step(
            state.model,
            inputs=state.batch,
            optimizer=state.optimizer,
            step=state.step,
            final=final,
            grad_scale=state.clip_coef,
        )
        if metrics:
            self.history.append({"step": float(state.step), **metrics})
        return metrics

    def report(self) -> CallbackReport:
        rep = CallbackReport()
        mon = self.monitor
        rep.data["dynamics_history"] = self.history
        rep.data["dynamics_config"] = _as_dict(mon.config)
        rep.data["dynamics_errors"] = {k: v.splitlines()[-1] for k, v in mon.errors.items()}
        rep.data["dynamics_warnings"] = list(mon.warnings)
        rep.metrics["dynamics_measurements"] = float(mon.measurements)
        rep.metrics["dynamics_snapshot_seconds"] = mon.snapshot_seconds
        for name, s in mon.timings.items():
            rep.metrics[f"dynamics_seconds_{name}"] = s
        if mon.snapshot is not None:
            rep.metrics["dynamics_snapshot_mb"] = mon.snapshot.nbytes / 2**20
        for name, tb in mon.errors.items():
            rep.insights.append(
                f"The dynamics metric '{name}' failed and was skipped from then on: {tb.strip().splitlines()[-1]}"
            )
        rep.tables["dynamics"] = [
            {"step": int(r["step"]), **{k: r[k] for k in _HEADLINE if k in r}} for r in self.history
        ]
        last_sparse = next((r for r in reversed(self.history) if any(k.startswith("sparse/kl_at_") for k in r)), None)
        if last_sparse is not None:
            rep.tables["sparse_quality"] = sparse_table(last_sparse)
            rep.insights += sparse_insights(last_sparse, mon.config)
        last = self.history[-1] if self.history else None
        if last is not None:
            rep.insights += change_insights(last, mon.config)
        return rep


def _as_dict(obj) -> dict:
    import dataclasses

    return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else dict(obj)


def sparse_table(row: dict[str, float]) -> list[dict]:
    """One record per sparse variant of a measurement: kept share, KL, top-1 agreement, and the random
    baseline beside it."""
    labels = sorted(
        {k[len("sparse/kl_at_") :] for k in row if k.startswith("sparse/kl_at_") and not k.endswith("_random")},
        key=lambda s: (not s[0].isdigit(), s),
    )
    out = []
    for lab in labels:
        rec = {
            "variant": lab,
            "step": int(row["step"]),
            "kept_ratio": row.get(f"sparse/kept_ratio_at_{lab}", row.get(f"sparse/params_ratio_at_{lab}")),
            "kl": row.get(f"sparse/kl_at_{lab}"),
            "top1_agree": row.get(f"sparse/top1_agree_at_{lab}"),
            "cosine": row.get(f"sparse/cosine_at_{lab}"),
        }
        if f"sparse/kl_at_{lab}_random" in row:
            rec["kl_random"] = row[f"sparse/kl_at_{lab}_random"]
            rec["top1_agree_random"] = row.get(f"sparse/top1_agree_at_{lab}_random")
        out.append(rec)
    return out


def sparse_insights(row: dict[str, float], cfg: DynamicsConfig) -> list[str]:
    out = []
    for f in cfg.sparse.keep_fractions:
        from modelxray.training_dynamics.naming import fmt_fraction

        lab = f"keep_{fmt_fraction(f)}"
        kl, kr = row.get(f"sparse/kl_at_{lab}"), row.get(f"sparse/kl_at_{lab}_random")
        if kl is not None and kr is not None:
            ratio = kr / kl if kl > 0 else float("inf")
            better = (
                f"{ratio:.1f}x lower than"
                if ratio >= 1.1
                else f"{1 / ratio:.1f}x higher than"
                if ratio < 0.9
                else "about the same as"
            )
            out.append(
                f"Keeping only the top {f * 100:g}% of weight changes by magnitude gives KL {kl:.3g} nats/token "
                f"against the full update, {better} a random {f * 100:g}% (KL {kr:.3g}) at step {int(row['step'])}."
            )
    for r in cfg.sparse.ranks:
        e = row.get(f"sparse/rank{r}_energy")
        if e is not None:
            kl = row.get(f"sparse/kl_at_rank{r}")
            tail = f", output KL {kl:.3g}" if kl is not None else ""
            out.append(
                f"A rank-{r} update captures {e:.1%} of the change's energy (||dW||^2) over all weight matrices{tail}."
            )
    return out


def change_insights(row: dict[str, float], cfg: DynamicsConfig) -> list[str]:
    out = []
    rel = row.get("param_change/relative_l2")
    if rel is not None:
        out.append(
            f"Over the last interval ({int(row.get('param_change/steps', 0))} steps) the weights moved by "
            f"{rel:.3g} of their norm (||dW||/||W||)."
        )
    t = cfg.param_change.thresholds
    if t:
        parts = [
            f"{row[k]:.2%} above {fmt_threshold(x)}"
            for x in t
            if (k := f"param_change/changed_ratio_at_{fmt_threshold(x)}") in row
        ]
        if parts:
            out.append("Share of weights changed: " + ", ".join(parts) + ".")
    layers = {
        k.split("/")[1]: v for k, v in row.items() if k.startswith("param_change/layer_") and k.endswith("/relative_l2")
    }
    if len(layers) > 1:
        top = max(layers, key=layers.get)
        low = min(layers, key=layers.get)
        out.append(f"Most moved block: {top} (relative change {layers[top]:.3g}); least: {low} ({layers[low]:.3g}).")
    if row.get("grad/vanishing_layers"):
        out.append(
            f"{int(row['grad/vanishing_layers'])} layer(s) had vanishing gradients (norm < {cfg.grad.vanish_below:g})."
        )
    if row.get("grad/exploding_layers"):
        out.append(
            f"{int(row['grad/exploding_layers'])} layer(s) had exploding gradients (norm > {cfg.grad.explode_above:g})."
        )
    return out
