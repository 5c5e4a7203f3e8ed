"""``param_change/*``: how far the weights moved since the snapshot, globally, per layer and per
component, and how many barely moved.

Absolute thresholds (the usual 1e-8 / 1e-6 / 1e-4) mislead: fp32 AdamW at lr 1e-5 changes 99.99%
of the weights of the embedded default, and after 10 steps 1.4% of the changes lie below 1e-6 but
99.999% below 1e-4, so they keep all or nothing. ``relative_thresholds`` scale with the step size
(multiples of lr x steps since the snapshot: with Adam each step moves a weight by at most about
lr), and quantiles of |dW| show the whole distribution.

Metric names (``t`` formatted by ``naming.fmt_threshold``, ``k`` a relative multiple):
``norm_l2 norm_l1 norm_max mean std relative_l2 mean_abs_delta``, ``sparsity_at_<t>``,
``changed_ratio_at_<t>``, ``sparsity_at_rel<k>``, ``changed_ratio_at_rel<k>``, ``threshold_rel<k>``,
``abs_delta_q<q>``, ``layer_<i>/{mean_abs_delta,sparsity,relative_l2}``,
``component/<family>/{mean_abs_delta,relative_l2}``, ``steps``.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from modelxray.training_dynamics.base import MetricContext, ParameterDelta
from modelxray.training_dynamics.change_stats import FIXED, combine, part_stats, summarize
from modelxray.training_dynamics.naming import fmt_threshold, layer_index
from modelxray.training_dynamics.snapshot import Snapshot


class ParameterChangeMetrics:
    name = "param_change"

    def compute(self, delta: ParameterDelta, snapshot: Snapshot, context: MetricContext) -> dict[str, float]:
        cfg = context.config.param_change
        thresholds = list(cfg.thresholds)
        rel = []
        if cfg.relative_thresholds:
            if context.lr:
                rel = [(k, k * context.lr * max(delta.steps, 1)) for k in cfg.relative_thresholds]
            else:
                context.cache.setdefault("warnings", []).append(
                    "param_change.relative_thresholds skipped: no learning rate (pass optimizer= or lr=)"
                )
        all_t = thresholds + [t for _, t in rel] + [cfg.layer_threshold]
        layer_col = FIXED + len(all_t) - 1

        rows, by_layer, by_comp, norms_layer, norms_comp = (
            [],
            defaultdict(list),
            defaultdict(list),
            defaultdict(float),
            defaultdict(float),
        )
        samples = []
        with torch.no_grad():
            for name, cur, snap in delta.pairs():
                for i, part in enumerate(snapshot.parts[name]):
                    row = part_stats(part.take(cur), part.take(snap), all_t)
                    nsq = snapshot.norm_sq[(name, i)]
                    rows.append((row, nsq))
                    layer = layer_index(name)
                    if layer is not None:
                        by_layer[layer].append(row)
                        norms_layer[layer] += nsq
                    by_comp[part.component].append(row)
                    norms_comp[part.component] += nsq
                idx = snapshot.sample.get(name)
                if idx is not None and cfg.quantiles:
                    samples.append(
                        (cur.reshape(-1)[idx.to(cur.device)] - snap.reshape(-1)[idx.to(cur.device)]).abs().cpu()
                    )

        if not rows:
            return {}
        total = combine([r for r, _ in rows])
        n = float(total[0])
        out = {k: v for k, v in summarize(total, sum(nsq for _, nsq in rows)).items()}
        out["steps"] = float(delta.steps)
        out["numel"] = n
        for j, t in enumerate(thresholds):
            frac = float(total[FIXED + j]) / n
            out[f"sparsity_at_{fmt_threshold(t)}"] = frac
            out[f"changed_ratio_at_{fmt_threshold(t)}"] = 1.0 - frac
        for j, (k, t) in enumerate(rel):
            frac = float(total[FIXED + len(thresholds) + j]) / n
            out[f"sparsity_at_rel{k:g}"] = frac
            out[f"changed_ratio_at_rel{k:g}"] = 1.0 - frac
            out[f"threshold_rel{k:g}"] = t
        if samples:
            sample = torch.cat(samples).double()
            for q, v in zip(cfg.quantiles, torch.quantile(sample, torch.tensor(cfg.quantiles, dtype=torch.float64))):
                out[f"abs_delta_q{q * 100:g}"] = float(v)
        if cfg.per_layer:
            for layer in sorted(by_layer):
                s = combine(by_layer[layer])
                summ = summarize(s, norms_layer[layer])
                out[f"layer_{layer}/mean_abs_delta"] = summ["mean_abs_delta"]
                out[f"layer_{layer}/relative_l2"] = summ["relative_l2"]
                out[f"layer_{layer}/sparsity"] = float(s[layer_col]) / float(s[0])
        if cfg.per_component:
            for comp in sorted(by_comp):
                summ = summarize(combine(by_comp[comp]), norms_comp[comp])
                out[f"component/{comp}/mean_abs_delta"] = summ["mean_abs_delta"]
                out[f"component/{comp}/relative_l2"] = summ["relative_l2"]
        return out
