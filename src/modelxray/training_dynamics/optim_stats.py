"""``optim/*``: what an Adam-family optimizer is doing: second-moment statistics and the effective
step it applied, per layer. Also the exact update of the last step (used by ``grad/update_ratio``).

For torch's Adam/AdamW the step just taken is ``lr * m_hat / (sqrt(v_hat) + eps)`` (+ ``lr * wd * W``
for AdamW's decoupled decay) with bias-corrected moments; for SGD it is ``lr * momentum_buffer`` or
``lr * (grad + wd * W)``. Optimizers we do not recognise give no ``optim/`` metrics.

Names: ``optim/second_moment_mean``, ``optim/second_moment_max``, ``optim/sqrt_second_moment_mean``,
``optim/effective_step_mean`` (mean |update| per element), ``optim/layer_<i>/effective_step``.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from modelxray.training_dynamics.base import MetricContext, ParameterDelta
from modelxray.training_dynamics.naming import layer_index
from modelxray.training_dynamics.snapshot import Snapshot, trainable


def groups_by_param(optimizer) -> dict[int, dict]:
    return {id(q): g for g in optimizer.param_groups for q in g["params"]}


def _step_count(state) -> float:
    step = state.get("step", 0)
    return float(step.item() if torch.is_tensor(step) else step)


def last_update(p: torch.Tensor, state: dict, group: dict, decoupled: bool) -> torch.Tensor | None:
    """The update the optimizer applied to ``p`` at its last step (as a positive step: W_new = W - u)."""
    lr = float(group["lr"])
    wd = float(group.get("weight_decay", 0.0) or 0.0)
    w = p.detach().float()
    if "exp_avg_sq" in state and "exp_avg" in state:
        t = _step_count(state)
        if t <= 0:
            return None
        b1, b2 = group["betas"]
        v = state["max_exp_avg_sq"] if group.get("amsgrad") and "max_exp_avg_sq" in state else state["exp_avg_sq"]
        m_hat = state["exp_avg"].float() / (1 - b1**t)
        v_hat = v.float() / (1 - b2**t)
        u = lr * m_hat / (v_hat.sqrt() + group["eps"])
        if wd and decoupled:
            u = u + lr * wd * w  # AdamW decays the weights before the Adam step (W_prev ~ W here)
        return u
    if "momentum_buffer" in state and state["momentum_buffer"] is not None:
        buf = state["momentum_buffer"].float()
        if group.get("nesterov") and p.grad is not None:
            g = p.grad.float() + wd * w
            return lr * (g + group["momentum"] * buf)
        return lr * buf
    if p.grad is not None and "momentum" in group:  # plain SGD
        return lr * (p.grad.float() + wd * w)
    return None


def is_decoupled(optimizer) -> bool:
    return type(optimizer).__name__.lower() in ("adamw",) or bool(optimizer.defaults.get("decoupled_weight_decay"))


class OptimizerMetrics:
    name = "optim"

    def compute(self, delta: ParameterDelta, snapshot: Snapshot, context: MetricContext) -> dict[str, float]:
        opt = context.optimizer
        if opt is None:
            return {}
        groups = groups_by_param(opt)
        decoupled = is_decoupled(opt)
        v_sum = v_max = sv_sum = step_sum = 0.0
        n_v = n_step = 0
        per_layer_sum, per_layer_n = defaultdict(float), defaultdict(int)
        with torch.no_grad():
            for name, p in trainable(context.model):
                state = opt.state.get(p)
                group = groups.get(id(p))
                if not state or group is None:
                    continue
                if "exp_avg_sq" in state:
                    t = _step_count(state)
                    v = state["exp_avg_sq"].float() / (1 - group["betas"][1] ** max(t, 1))
                    v_sum += float(v.sum(dtype=torch.float64))
                    sv_sum += float(v.sqrt().sum(dtype=torch.float64))
                    v_max = max(v_max, float(v.max()))
                    n_v += v.numel()
                u = last_update(p, state, group, decoupled)
                if u is None:
                    continue
                s = float(u.abs().sum(dtype=torch.float64))
                step_sum += s
                n_step += u.numel()
                layer = layer_index(name)
                if layer is not None and context.config.optim.per_layer:
                    per_layer_sum[layer] += s
                    per_layer_n[layer] += u.numel()
        out = {}
        if n_v:
            out.update(
                {"second_moment_mean": v_sum / n_v, "second_moment_max": v_max, "sqrt_second_moment_mean": sv_sum / n_v}
            )
        if n_step:
            out["effective_step_mean"] = step_sum / n_step
            for layer in sorted(per_layer_sum):
                out[f"layer_{layer}/effective_step"] = per_layer_sum[layer] / per_layer_n[layer]
        return out
