"""The AWQ algorithm (see ``modelxray.quant.awq`` for the method and its config)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from modelxray.quant.rtn import QuantSpec, fake_quantize, group_bounds
from modelxray.quant.weight import layer_row

if TYPE_CHECKING:
    from modelxray.quant.awq import AWQQuantizer
    from modelxray.quant.calibration import BlockInputs, ModelInputs


def _collect(block, layer_targets, inputs: BlockInputs | ModelInputs, sample_tokens: int, seed: int):
    """Per layer: mean |x| per input channel over all calibration tokens, a random sample of input
    rows, and which layers read the same input tensor (layers that received no input are left out)."""
    sums, counts, samples, firsts = {}, {}, {}, {}
    gen = torch.Generator().manual_seed(seed)
    per_batch = max(1, sample_tokens // max(inputs.n_batches, 1))

    def add(name, x, raw):
        sums[name] = sums.get(name, 0) + x.abs().sum(0)
        counts[name] = counts.get(name, 0) + x.shape[0]
        samples.setdefault(name, []).append(x[torch.randperm(x.shape[0], generator=gen)[:per_batch]])
        firsts.setdefault(name, raw)  # kept alive, so no later tensor reuses its address

    inputs.observe(block, layer_targets, add)
    groups: dict[tuple, list] = {}
    for t in layer_targets:
        if t.name in firsts:
            raw = firsts[t.name]
            groups.setdefault((raw.data_ptr(), tuple(raw.shape), raw.stride()), []).append(t)
    return (
        {n: sums[n] / counts[n] for n in sums},
        {n: torch.cat(v) for n, v in samples.items()},
        list(groups.values()),
    )


def _weight_mean(ws: list[torch.Tensor], spec: QuantSpec) -> torch.Tensor:
    """Mean over output rows of |w| normalised by its group's max: AWQ's weight salience."""
    w = torch.cat(ws, 0).abs()
    norm = torch.empty_like(w)
    for a, b in group_bounds(w.shape[1], spec):
        norm[:, a:b] = w[:, a:b] / (w[:, a:b].amax(dim=1, keepdim=True) + 1e-6)
    return norm.mean(0)


def search_scale(
    x: torch.Tensor, x_mean: torch.Tensor, ws: list[torch.Tensor], specs: list[QuantSpec], grid: int, duo: bool
) -> tuple[torch.Tensor, float]:
    """The per-input-channel scale minimising the group's output error on the sample ``x``."""
    refs = [x @ w.t() for w in ws]
    w_mean = _weight_mean(ws, specs[0]) if duo else None
    best, best_loss, best_ratio = torch.ones_like(x_mean), float("inf"), 0.0
    for i in range(grid):
        ratio = i / grid
        s = x_mean.pow(ratio) / (w_mean.pow(1 - ratio) + 1e-4) if duo else x_mean.pow(ratio)
        s = s.clamp(min=1e-4)
        s = s / (s.max() * s.min()).sqrt()
        loss = 0.0
        for w, spec, ref in zip(ws, specs, refs):
            q = fake_quantize(w * s, spec) / s
            loss += float(((x @ q.t() - ref) ** 2).sum())
        if loss < best_loss:
            best, best_loss, best_ratio = s, loss, ratio
    return best, best_ratio


def search_clip(x: torch.Tensor, w: torch.Tensor, spec: QuantSpec, grid: int, clip_min: float) -> torch.Tensor:
    """Per (row, group) clipping ratio of the weight range minimising that group's output error."""
    bounds = group_bounds(w.shape[1], spec)
    if spec.granularity == "tensor":
        return torch.ones(1, 1, device=w.device)
    clip = torch.ones(w.shape[0], len(bounds), device=w.device)
    row_spec = replace(spec, granularity="channel")
    for g, (a, b) in enumerate(bounds):
        xg, wg = x[:, a:b], w[:, a:b]
        best_err = torch.full((w.shape[0],), float("inf"), device=w.device)
        for i in range(grid):
            ratio = 1.0 - (1.0 - clip_min) * i / grid
            c = torch.full((w.shape[0], 1), ratio, device=w.device)
            err = ((xg @ (fake_quantize(wg, row_spec, c) - wg).t()) ** 2).sum(0)
            better = err < best_err
            best_err = torch.where(better, err, best_err)
            clip[better, g] = ratio
    return clip


def quantize_block(
    cfg: AWQQuantizer, block, layer_targets, plan, inputs: BlockInputs | ModelInputs
) -> tuple[list[dict], list[float]]:
    """AWQ on each group of target layers of ``block`` that read the same input: one ``layer_row``
    per layer, and the scale exponent chosen for each group."""
    x_mean, samples, groups = _collect(block, layer_targets, inputs, cfg.sample_tokens, cfg.seed)
    rows, ratios = [], []
    for group in groups:
        x = samples[group[0].name]
        ws = [t.weight_matrix().detach().float() for t in group]
        specs = [plan[t.name] for t in group]
        s, ratio = search_scale(x, x_mean[group[0].name], ws, specs, cfg.grid, cfg.duo_scaling)
        ratios.append(ratio)
        for t, w, spec in zip(group, ws, specs):
            ws_scaled = w * s
            clip = None
            if cfg.clip_search and not _is_qk(t.name):
                clip = search_clip(x[: cfg.clip_tokens] / s, ws_scaled, spec, cfg.clip_grid, cfg.clip_min)
            q = (fake_quantize(ws_scaled, spec, clip) / s).to(t.tensor().dtype)
            rows.append(layer_row(t, spec, w, q))
            t.set_weight_matrix(q)
    return rows, ratios


def _is_qk(name: str) -> bool:
    """Query and key projections skip the clip search (their errors pass through softmax), as in AWQ."""
    leaf = name.rsplit(".", 1)[-1]
    return leaf in ("q_proj", "k_proj", "query", "key")
