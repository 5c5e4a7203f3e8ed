"""The GPTQ algorithm (see ``modelxray.quant.gptq`` for the method and its config)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from modelxray.quant.rtn import QuantSpec, group_bounds, group_params, quantize_with
from modelxray.quant.weight import layer_row

if TYPE_CHECKING:
    from modelxray.quant.calibration import BlockInputs, ModelInputs
    from modelxray.quant.gptq import GPTQQuantizer


def _params(w: torch.Tensor, spec: QuantSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale and offset per row of a (rows, width) slice; per tensor, one pair shared by all rows."""
    if spec.granularity == "tensor":
        scale, lo = group_params(w.reshape(1, -1), spec)
        return scale.reshape(1).expand(w.shape[0]), lo.reshape(1).expand(w.shape[0])
    scale, lo = group_params(w, spec)
    return scale.squeeze(1), lo.squeeze(1)


def _params_mse(w: torch.Tensor, spec: QuantSpec, grid: int, clip_min: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Like ``_params``, but each row's range is shrunk by the factor in [clip_min, 1] that minimises
    that row's squared rounding error (the ``mse`` option of the GPTQ reference quantizer)."""
    best_s, best_l = _params(w, spec)
    best_err = ((quantize_with(w, best_s[:, None], best_l[:, None], spec) - w) ** 2).sum(1)
    for i in range(1, grid):
        ratio = 1.0 - (1.0 - clip_min) * i / (grid - 1)
        s, l = _params(w * ratio, spec)
        err = ((quantize_with(w, s[:, None], l[:, None], spec) - w) ** 2).sum(1)
        better = err < best_err
        best_s, best_l, best_err = (
            torch.where(better, s, best_s),
            torch.where(better, l, best_l),
            torch.minimum(err, best_err),
        )
    return best_s, best_l


def gptq_quantize(
    weight: torch.Tensor,
    hessian: torch.Tensor,
    spec: QuantSpec,
    act_order: bool = True,
    damp: float = 0.01,
    block_size: int = 128,
    clip_grid: int = 0,
    clip_min: float = 0.8,
) -> torch.Tensor:
    """GPTQ-quantize ``weight`` (out x in) given ``hessian`` (in x in); returns the dequantized weight.

    ``clip_grid > 1`` searches each group's range shrink factor in [clip_min, 1] (see ``_params_mse``)."""
    params = (lambda x: _params_mse(x, spec, clip_grid, clip_min)) if clip_grid > 1 else (lambda x: _params(x, spec))
    W = weight.detach().float().clone()
    H = hessian.float().clone()
    del hessian  # the caller's, freed here when it handed it over (``quantize_block``)
    rows, cols = W.shape
    dead = torch.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0
    bounds = group_bounds(cols, spec)
    group_of = torch.empty(cols, dtype=torch.long)
    for g, (a, b) in enumerate(bounds):
        group_of[a:b] = g
    scales = torch.zeros(rows, len(bounds), device=W.device)
    los = torch.zeros(rows, len(bounds), device=W.device)
    ready = torch.zeros(len(bounds), dtype=torch.bool)
    if spec.granularity == "tensor":
        s, l = params(W)
        scales[:], los[:], ready[:] = s[:, None], l[:, None], True
    perm = torch.arange(cols, device=W.device)
    if act_order:
        perm = torch.argsort(torch.diag(H), descending=True)
        for g, (a, b) in enumerate(bounds):  # static groups: scales from the weights before any update
            if not ready[g]:
                scales[:, g], los[:, g] = params(W[:, a:b])
                ready[g] = True
        W, H = W[:, perm], H[perm[:, None], perm]  # one gather: no (in x in) intermediate
    order, group_list = perm.tolist(), group_of.tolist()  # read per column on the host (no GPU sync each)
    H.diagonal().add_(damp * torch.mean(torch.diag(H)))  # the damping, without an (in x in) identity
    # the inverse's upper Cholesky factor, each (in x in) step freed once the next holds its result
    L = torch.linalg.cholesky(H)
    del H
    inverse = torch.cholesky_inverse(L)
    del L
    Hinv = torch.linalg.cholesky(inverse, upper=True)
    del inverse
    Q = torch.zeros_like(W)
    for i1 in range(0, cols, block_size):
        i2 = min(i1 + block_size, cols)
        W1 = W[:, i1:i2].clone()
        Q1 = torch.zeros_like(W1)
        Err1 = torch.zeros_like(W1)
        Hinv1 = Hinv[i1:i2, i1:i2]
        for i in range(i2 - i1):
            g = group_list[order[i1 + i]]
            if not ready[g]:  # lazy groups (no act_order): columns arrive in order
                a, b = bounds[g]
                current = torch.cat([W1[:, i:], W[:, i2:]], dim=1)[:, : b - a]
                scales[:, g], los[:, g] = params(current)
                ready[g] = True
            w = W1[:, i]
            q = quantize_with(w, scales[:, g], los[:, g], spec)
            Q1[:, i] = q
            err = (w - q) / Hinv1[i, i]
            W1[:, i:] -= err.unsqueeze(1) @ Hinv1[i, i:].unsqueeze(0)
            Err1[:, i] = err
        Q[:, i1:i2] = Q1
        W[:, i2:] -= Err1 @ Hinv[i1:i2, i2:]
    if act_order:
        Q = Q[:, torch.argsort(perm)]
    return Q.to(weight.dtype)


def quantize_block(cfg: GPTQQuantizer, block, layer_targets, plan, inputs: BlockInputs | ModelInputs) -> list[dict]:
    """GPTQ on each target layer of ``block`` from the Hessian of its calibration inputs; a layer that
    received no input is left as it is (the frame reports it)."""
    hessians = _collect_hessians(block, layer_targets, inputs)
    rows = []
    for t in layer_targets:
        if t.name not in hessians:
            continue
        spec = plan[t.name]
        w = t.weight_matrix()
        q = gptq_quantize(  # each Hessian is let go once its layer is done
            w, hessians.pop(t.name), spec, cfg.act_order, cfg.damp, cfg.block_size, cfg.clip_grid, cfg.clip_min
        )
        rows.append(layer_row(t, spec, w, q))
        t.set_weight_matrix(q)
    return rows


def _collect_hessians(block, layer_targets, inputs: BlockInputs | ModelInputs) -> dict[str, torch.Tensor]:
    """H = 2/n * sum x x^T over every calibration token entering each target layer."""
    sums: dict[str, torch.Tensor] = {}
    counts: dict[str, int] = {}

    def add(name, x, _raw):
        sums[name] = sums.get(name, 0) + x.t() @ x
        counts[name] = counts.get(name, 0) + x.shape[0]

    inputs.observe(block, layer_targets, add)
    with torch.inference_mode():  # the sums were made there: 2 * sum / n in place, no second copy
        return {n: sums[n].mul_(2).div_(counts[n]) for n in sums}
