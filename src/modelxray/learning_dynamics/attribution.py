"""Which training examples drove a transition: TracIn (Pruthi et al. 2020, "Estimating Training Data
Influence by Tracing Gradient Descent"), checkpoint version (TracInCP).

For a training example z and a target set T (e.g. test examples that became correct across the
transition), summed over saved checkpoints t with learning rate lr_t:

    influence(z, T)   = Σ_t lr_t · ∇L(w_t; z) · ∇L(w_t; T)      (L(T) = mean loss over T)
    self_influence(z) = Σ_t lr_t · ||∇L(w_t; z)||²

Positive influence: a step on z lowers the target loss (a *proponent*); negative: an *opponent*.
High self-influence flags examples the model keeps fighting, mislabelled ones first (Pruthi et al.,
section 4.1). Per-example gradients come from ``torch.func`` (``vmap`` over ``grad`` of a
``functional_call``) in chunks of ``chunk_size``; models whose ops have no batching rule fall back
to one backward per example. Checkpoints between the two sides of a transition are the relevant
ones: pass those.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class TracInCheckpoint:
    params: dict[str, torch.Tensor]  # a state dict (parameters; buffers are taken from it when present)
    lr: float
    step: int = 0


@dataclass
class TracInResult:
    influence: np.ndarray  # (N,) on the target set
    self_influence: np.ndarray  # (N,)
    checkpoints: list[int] = field(default_factory=list)  # steps used

    def top(self, k: int = 10, by: str = "influence", labels=None, regions=None, given_labels=None) -> list[dict]:
        """Rows of the top-k: ``by`` = ``influence`` (proponents), ``opponents`` (most negative
        influence) or ``self_influence``. ``labels``/``regions`` per training position are added when given."""
        score = {"influence": self.influence, "opponents": -self.influence, "self_influence": self.self_influence}[by]
        order = np.argsort(-score, kind="stable")[:k]
        rows = []
        for rank, i in enumerate(order, 1):
            row = {
                "rank": rank,
                "index": int(i),
                "influence": float(self.influence[i]),
                "self_influence": float(self.self_influence[i]),
            }
            if labels is not None:
                row["label"] = int(labels[i])
            if regions is not None:
                row["region"] = str(regions[i]) if regions[i] is not None else None
            rows.append(row)
        return rows


def _flat_grads(g: dict[str, torch.Tensor], names: list[str], batched: bool) -> torch.Tensor:
    if batched:
        return torch.cat([g[n].reshape(g[n].shape[0], -1) for n in names], dim=1)
    return torch.cat([g[n].reshape(-1) for n in names])


def tracin(
    model: nn.Module,
    checkpoints: Sequence[TracInCheckpoint],
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    x_target: torch.Tensor,
    y_target: torch.Tensor,
    loss_fn: Callable = F.cross_entropy,
    param_names: Sequence[str] | None = None,
    chunk_size: int = 256,
) -> TracInResult:
    """TracInCP influence of every training example on the target set, and self-influence.

    ``model`` gives the architecture (its weights are not changed); ``param_names`` restricts the
    gradients to some parameters (default: all that require grad)."""
    from torch.func import functional_call, grad, vmap

    device = next(model.parameters()).device
    names = (
        list(param_names) if param_names is not None else [n for n, p in model.named_parameters() if p.requires_grad]
    )
    buffers = {n: b for n, b in model.named_buffers()}
    was_training = model.training
    model.eval()
    influence = torch.zeros(len(y_train), dtype=torch.float64)
    self_inf = torch.zeros(len(y_train), dtype=torch.float64)
    try:
        for ck in checkpoints:
            state = {k: v.detach().to(device) for k, v in ck.params.items()}
            params = {n: state[n] for n in names}
            frozen = {k: v for k, v in state.items() if k not in params}
            frozen = {**{k: v.to(device) for k, v in buffers.items()}, **frozen}

            def loss_of(p, x, y):
                return loss_fn(functional_call(model, {**frozen, **p}, (x,)), y)

            g_target = _flat_grads(grad(loss_of)(params, x_target.to(device), y_target.to(device)), names, False)

            def one(p, x, y):
                return loss_of(p, x[None], y[None])

            per_example = vmap(grad(one), in_dims=(None, 0, 0))
            for i in range(0, len(y_train), chunk_size):
                xb, yb = x_train[i : i + chunk_size].to(device), y_train[i : i + chunk_size].to(device)
                try:
                    g = _flat_grads(per_example(params, xb, yb), names, True)
                except (RuntimeError, NotImplementedError):  # an op without a batching rule
                    g = torch.stack(
                        [_flat_grads(grad(one)(params, xb[j], yb[j]), names, False) for j in range(len(yb))]
                    )
                g = g.double()
                influence[i : i + len(yb)] += ck.lr * (g @ g_target.double()).cpu()
                self_inf[i : i + len(yb)] += ck.lr * (g * g).sum(1).cpu()
    finally:
        model.train(was_training)
    return TracInResult(influence.numpy(), self_inf.numpy(), [int(c.step) for c in checkpoints])


def learned_targets(model: nn.Module, first: TracInCheckpoint, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Positions of ``(x, y)`` that ``model`` (current weights) gets right but the ``first``
    checkpoint got wrong: what the transition taught. Empty if none."""
    from torch.func import functional_call

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            x, y = x.to(device), y.to(device)
            now = model(x).argmax(-1) == y
            state = {k: v.to(device) for k, v in first.params.items()}
            before = functional_call(model, state, (x,)).argmax(-1) == y
    finally:
        model.train(was_training)
    return torch.nonzero(now & ~before).flatten().cpu()
