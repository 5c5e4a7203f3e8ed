"""``grad/*``: gradient norms globally and per layer, update-to-weight ratios, and flags for
vanishing or exploding layers. Read after ``optimizer.step()`` and before the gradients are zeroed.

``layer_<i>/update_ratio`` is ||update|| / ||W|| of the step just taken: exact from the optimizer's
state for Adam/AdamW and SGD (see ``optim_stats.last_update``); without an optimizer it falls back to
the mean per step over the interval, ||W - W0|| / (steps x ||W0||), and says so in
``grad/update_ratio_source`` (1 = exact last step, 0 = interval mean).

Names: ``grad/global_norm``, ``grad/layer_<i>/norm``, ``grad/component/<family>/norm``,
``grad/layer_<i>/update_ratio``, ``grad/vanishing_layers``, ``grad/exploding_layers`` (counts),
``grad/min_layer_norm``, ``grad/max_layer_norm``, ``grad/clip_coef``. Norms are of the raw
gradients: a loop that clipped them passes its clip coefficient as ``grad_scale``.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from modelxray.training_dynamics.base import MetricContext, ParameterDelta
from modelxray.training_dynamics.naming import component, layer_index
from modelxray.training_dynamics.optim_stats import groups_by_param, is_decoupled, last_update
from modelxray.training_dynamics.snapshot import Snapshot, trainable


class GradientMetrics:
    name = "grad"

    def compute(self, delta: ParameterDelta, snapshot: Snapshot, context: MetricContext) -> dict[str, float]:
        cfg = context.config.grad
        sq_total = 0.0
        sq_layer, sq_comp = defaultdict(float), defaultdict(float)
        upd_layer, w_layer = defaultdict(float), defaultdict(float)
        opt = context.optimizer
        groups = groups_by_param(opt) if opt is not None else {}
        decoupled = is_decoupled(opt) if opt is not None else False
        exact = opt is not None
        any_grad = False
        scale = context.grad_scale if context.grad_scale > 0 else 1.0
        with torch.no_grad():
            for name, p in trainable(context.model):
                layer = layer_index(name)
                if p.grad is not None:
                    any_grad = True
                    g2 = float(torch.linalg.vector_norm(p.grad.float(), dtype=torch.float64) / scale) ** 2
                    sq_total += g2
                    sq_comp[component(name)] += g2
                    if layer is not None:
                        sq_layer[layer] += g2
                if layer is None or not cfg.per_layer:
                    continue
                w_layer[layer] += float(torch.linalg.vector_norm(p.detach().float(), dtype=torch.float64) ** 2)
                u = None
                if opt is not None and opt.state.get(p) and id(p) in groups:
                    u = last_update(p, opt.state[p], groups[id(p)], decoupled)
                if u is None:
                    exact = False
                    d = delta.of(name)
                    upd_layer[layer] += (
                        float(torch.linalg.vector_norm(d, dtype=torch.float64) ** 2) / max(delta.steps, 1) ** 2
                    )
                else:
                    upd_layer[layer] += float(torch.linalg.vector_norm(u, dtype=torch.float64) ** 2)
        out: dict[str, float] = {}
        if any_grad:
            out["global_norm"] = sq_total**0.5
            out["clip_coef"] = scale
            for comp in sorted(sq_comp):
                out[f"component/{comp}/norm"] = sq_comp[comp] ** 0.5
        if cfg.per_layer:
            norms = {layer: v**0.5 for layer, v in sq_layer.items()}
            for layer in sorted(norms):
                out[f"layer_{layer}/norm"] = norms[layer]
            if norms:
                out["min_layer_norm"] = min(norms.values())
                out["max_layer_norm"] = max(norms.values())
                out["vanishing_layers"] = float(sum(v < cfg.vanish_below for v in norms.values()))
                out["exploding_layers"] = float(sum(v > cfg.explode_above for v in norms.values()))
            for layer in sorted(upd_layer):
                if w_layer[layer] > 0:
                    out[f"layer_{layer}/update_ratio"] = (upd_layer[layer] / w_layer[layer]) ** 0.5
            if upd_layer:
                out["update_ratio_source"] = 1.0 if exact else 0.0
        return out
