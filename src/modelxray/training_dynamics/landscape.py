"""How the network's units and its loss surface look at a measurement, from the fixed probe batch:

- ``ActivationMetrics`` (``activations/``): the share of units that are dead (never above
  ``dead_below`` on any probe position: a ReLU that stopped firing) and, for bounded activations
  (tanh, sigmoid, hardtanh, ReLU6), saturated (at a bound on at least ``saturated_share`` of the
  positions: their gradient vanishes), over all units and per activation module.
- ``SharpnessMetrics`` (``sharpness/``): the loss change under a random perturbation of every
  weight, each tensor's perturbation scaled to ``sigma`` x its own norm (filter-normalised, as
  loss-landscape studies compare models of different scale), averaged over ``samples`` draws with
  its standard error, and the output KL it causes. A sharp minimum loses more for the same relative
  step. The top Hessian eigenvalue would need double backward through the model; the perturbation
  needs only forwards.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from modelxray.training_dynamics.base import MetricContext, ParameterDelta
from modelxray.training_dynamics.outputs import compare_logits, forward_logits, probe_inputs
from modelxray.training_dynamics.snapshot import Snapshot

# activation modules by class name, and the bounds of those that saturate
_UNBOUNDED = {"ReLU", "LeakyReLU", "GELU", "NewGELUActivation", "GELUActivation", "FastGELUActivation",
              "QuickGELUActivation", "SiLU", "SiLUActivation", "Mish", "ELU", "Softplus"}  # fmt: skip
_BOUNDS = {"Tanh": (-1.0, 1.0), "Sigmoid": (0.0, 1.0), "Hardtanh": (-1.0, 1.0), "ReLU6": (0.0, 6.0)}


def _probe(context: MetricContext) -> Any:
    probe = context.probe if context.probe is not None else context.inputs
    if probe is None:
        context.cache.setdefault("warnings", []).append(
            "activation and sharpness metrics skipped: no probe batch (pass probe= or inputs= to the monitor)"
        )
    return probe


class ActivationMetrics:
    name = "activations"

    def compute(self, delta: ParameterDelta, snapshot: Snapshot, context: MetricContext) -> dict[str, float]:
        probe = _probe(context)
        if probe is None:
            return {}
        cfg = context.config.activations
        outputs: dict[str, tuple[str, torch.Tensor]] = {}
        hooks = []

        def keep(name: str, kind: str):
            def hook(_module, _inputs, output) -> None:  # returns None: the output flows on unchanged
                if torch.is_tensor(output) and name not in outputs:
                    outputs[name] = (kind, output.detach().float())

            return hook

        for mname, module in context.model.named_modules():
            kind = type(module).__name__
            if kind in _UNBOUNDED or kind in _BOUNDS:
                hooks.append(module.register_forward_hook(keep(mname, kind)))
        try:
            forward_logits(context.model, probe)
        finally:
            for h in hooks:
                h.remove()
        out: dict[str, float] = {}
        dead = units = sat = bounded = 0
        for mname, (kind, act) in outputs.items():
            x = act.reshape(-1, act.shape[-1]) if act.dim() > 1 else act.reshape(-1, 1)
            d = int((x.max(0).values <= cfg.dead_below).sum())
            dead, units = dead + d, units + x.shape[1]
            row = {"dead_share": d / x.shape[1]}
            if kind in _BOUNDS:
                lo, hi = _BOUNDS[kind]
                margin = cfg.saturation_margin * (hi - lo)
                at_bound = ((x <= lo + margin) | (x >= hi - margin)).float().mean(0)
                s = int((at_bound >= cfg.saturated_share).sum())
                sat, bounded = sat + s, bounded + x.shape[1]
                row["saturated_share"] = s / x.shape[1]
            if cfg.per_layer:
                out.update({f"{mname}/{k}": v for k, v in row.items()})
        if units:
            out["dead_share"] = dead / units
            out["units"] = float(units)
        if bounded:
            out["saturated_share"] = sat / bounded
        return out


class SharpnessMetrics:
    name = "sharpness"

    def compute(self, delta: ParameterDelta, snapshot: Snapshot, context: MetricContext) -> dict[str, float]:
        probe = _probe(context)
        if probe is None:
            return {}
        cfg = context.config.sharpness
        model = context.model
        params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
        base = forward_logits(model, probe)
        _, kwargs, mask = probe_inputs(probe)
        ids = kwargs.get("input_ids")
        gen = torch.Generator().manual_seed(cfg.seed + context.measurement)
        losses, kls = [], []
        base_loss = _lm_loss(base, ids, mask) if ids is not None else None
        for _ in range(cfg.samples):
            moved = {}
            for n, p in params.items():
                u = torch.randn(p.shape, generator=gen).to(device=p.device, dtype=torch.float32)
                scale = cfg.sigma * float(p.float().norm()) / max(float(u.norm()), 1e-30)
                moved[n] = (p.float() + scale * u).to(p.dtype)
            logits = forward_logits(model, probe, moved)
            kls.append(compare_logits(base, logits, mask)["kl"])
            if base_loss is not None:
                losses.append(_lm_loss(logits, ids, mask) - base_loss)
        out = {"kl": sum(kls) / len(kls), "sigma": cfg.sigma}
        if losses:
            mean = sum(losses) / len(losses)
            out["loss_increase"] = mean
            if len(losses) > 1:
                var = sum((v - mean) ** 2 for v in losses) / (len(losses) - 1)
                out["loss_increase_se"] = math.sqrt(var / len(losses))
        return out


def _lm_loss(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor | None) -> float:
    """Mean next-token cross-entropy of ``logits`` (B, T, V) on ``ids`` (B, T), masked positions out."""
    ids = ids.to(logits.device)
    target = ids[:, 1:].reshape(-1)
    nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), target, reduction="none")
    if mask is not None:
        keep = mask[:, 1:].reshape(-1).to(nll.device).bool()
        nll = nll[keep]
    return float(nll.mean())
