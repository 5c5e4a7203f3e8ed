"""``sparse/*``: would a sparse or a low-rank update have done the same as the full one?

Each variant keeps part of dW = W - W0 (W0 = the snapshot) and forwards the fixed probe batch with
``W0 + masked dW`` swapped in (``functional_call``: the model is never modified), compared with the
full model's logits:

* threshold ``t``: keep |dW| > t. ``_random``: per tensor, exactly as many entries kept, at random
  (seeded); if magnitude beats random, the large changes are the ones that matter.
* ``keep_<k>pct``: per tensor the top k% of |dW| (ties broken so exactly ceil(k n) are kept).
* ``rank<r>``: every weight matrix's dW (GPT-2's fused q/k/v block by block) replaced by its best
  rank-r approximation; vectors, embeddings and norms keep their full change.
  ``rank<r>_energy`` = share of ||dW||^2 that rank r captures (||dW||^2-weighted over matrices).

Names per variant ``v``: ``kl_at_v``, ``cosine_at_v``, ``mse_at_v``, ``top1_agree_at_v``,
``kept_ratio_at_v``, ``unchanged_ratio_at_v`` (and the same with ``_random``); ``rank<r>_energy``,
``component/<family>/rank<r>_energy``; ``forwards`` and ``seconds_per_forward`` (the cost).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict

import torch

from modelxray.training_dynamics import low_rank
from modelxray.training_dynamics.base import MetricContext, ParameterDelta
from modelxray.training_dynamics.naming import fmt_fraction, fmt_threshold
from modelxray.training_dynamics.outputs import compare_logits, forward_logits, probe_inputs
from modelxray.training_dynamics.snapshot import Snapshot

_NOT_MATRICES = ("embeddings", "lm_head", "norms")


def random_mask(shape: torch.Size, k: int, gen: torch.Generator) -> torch.Tensor:
    """A bool mask with exactly ``k`` True entries at random positions."""
    n = math.prod(shape)
    mask = torch.zeros(n, dtype=torch.bool)
    if k:
        mask[torch.randperm(n, generator=gen)[:k]] = True
    return mask.view(shape)


def top_mask(a: torch.Tensor, k: int) -> torch.Tensor:
    """A bool mask of exactly ``k`` entries of ``a`` with the largest values (ties broken by position)."""
    flat = a.reshape(-1)
    n = flat.numel()
    if k >= n:
        return torch.ones_like(a, dtype=torch.bool)
    if k <= 0:
        return torch.zeros_like(a, dtype=torch.bool)
    v = flat.kthvalue(n - k + 1).values  # the k-th largest value
    mask = flat > v
    short = k - int(mask.sum())
    if short > 0:
        ties = torch.nonzero(flat == v).squeeze(1)[:short]
        mask[ties] = True
    return mask.view(a.shape)


class SparseQualityMetrics:
    name = "sparse"

    def compute(self, delta: ParameterDelta, snapshot: Snapshot, context: MetricContext) -> dict[str, float]:
        cfg = context.config.sparse
        if not context.final and context.measurement % cfg.every:
            return {}
        probe = context.probe if context.probe is not None else context.inputs
        if probe is None:  # a loop that passes no batch (yet): skip this measurement, measure once one comes
            context.cache.setdefault("warnings", []).append(
                "sparse quality skipped: no probe batch (pass probe= when creating the monitor, "
                "or inputs= to on_optimizer_step)"
            )
            return {}
        _, _, attn = probe_inputs(probe)
        full = context.cache.get("probe_logits")
        if full is None:
            full = context.cache["probe_logits"] = forward_logits(context.model, probe)
        state = {"forwards": 0, "seconds": 0.0}
        out: dict[str, float] = {}
        gen = torch.Generator().manual_seed(cfg.seed + context.step)

        def score(label: str, params: dict[str, torch.Tensor], kept: int, total: int) -> None:
            t0 = time.perf_counter()
            logits = forward_logits(context.model, probe, params)
            state["seconds"] += time.perf_counter() - t0
            state["forwards"] += 1
            for k, v in compare_logits(full, logits, attn).items():
                v = max(v, 0.0) if k in ("kl", "mse") else v  # float rounding may give -1e-9
                out[f"{k}_at_{label}"] = v
            out[f"kept_ratio_at_{label}"] = kept / total
            out[f"unchanged_ratio_at_{label}"] = 1.0 - kept / total

        def masked_variant(choose) -> tuple[dict, dict, int, int]:
            """Variant params keeping dW where ``choose(|dW|) -> mask``; also the kept counts per tensor."""
            params, counts, kept, total = {}, {}, 0, 0
            with torch.no_grad():
                for name, cur, snap in delta.pairs():
                    mask = choose((cur - snap).abs())
                    counts[name] = int(mask.sum())
                    params[name] = torch.where(mask, cur, snap)
                    kept += counts[name]
                    total += cur.numel()
            return params, counts, kept, total

        def random_variant(counts: dict[str, int]) -> dict:
            params = {}
            with torch.no_grad():
                for name, cur, snap in delta.pairs():
                    mask = random_mask(cur.shape, counts[name], gen).to(cur.device)
                    params[name] = torch.where(mask, cur, snap)
            return params

        variants = [(fmt_threshold(t), (lambda a, t=t: a > t)) for t in cfg.thresholds]
        variants += [
            (f"keep_{fmt_fraction(f)}", (lambda a, f=f: top_mask(a, math.ceil(f * a.numel()))))
            for f in cfg.keep_fractions
        ]
        for label, choose in variants:
            params, counts, kept, total = masked_variant(choose)
            score(label, params, kept, total)
            del params
            if cfg.random_baseline:
                score(f"{label}_random", random_variant(counts), kept, total)
                for k in ("kept_ratio", "unchanged_ratio"):
                    out.pop(f"{k}_at_{label}_random", None)
                # keep the documented metric names: kl_at_<t>_random
                for k in ("kl", "cosine", "mse", "top1_agree"):
                    out[f"{k}_at_{label}_random"] = out.pop(f"{k}_at_{label}_random")
        if cfg.ranks:
            self._low_rank(delta, snapshot, context, cfg, score, out)
        out["forwards"] = float(state["forwards"])
        if state["forwards"]:
            out["seconds_per_forward"] = state["seconds"] / state["forwards"]
        return out

    def _low_rank(self, delta, snapshot, context, cfg, score, out) -> None:
        ranks = sorted(set(cfg.ranks))
        rmax = max(ranks)
        captured, totals = defaultdict(float), defaultdict(float)  # (component, r) -> sum, component -> sum
        approx: dict[str, dict[int, torch.Tensor]] = {}  # name -> rank -> W0 + truncated dW
        currents: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for name, cur, snap in delta.pairs():
                currents[name] = cur
                prts = snapshot.parts[name]
                if cur.dim() != 2 or all(p.component in _NOT_MATRICES for p in prts):
                    continue
                d = cur - snap
                variants = {r: snap.clone() for r in ranks} if cfg.lowrank_kl else {}
                for part in prts:
                    dp = part.take(d)
                    total_sq = float(torch.linalg.vector_norm(dp, dtype=torch.float64) ** 2)
                    u, s, v = low_rank.top_svd(
                        dp,
                        rmax,
                        mode=cfg.svd,
                        oversample=cfg.svd_oversample,
                        niter=cfg.svd_niter,
                        generator_seed=cfg.seed,
                    )
                    for r, e in low_rank.rank_energy(s, total_sq, ranks).items():
                        captured[(part.component, r)] += e * total_sq
                    totals[part.component] += total_sq
                    for r, w in variants.items():
                        part.take(w).add_(low_rank.truncate(u, s, v, r))
                if variants:
                    approx[name] = variants
        grand = sum(totals.values())
        for r in ranks:
            got = sum(v for (c, rr), v in captured.items() if rr == r)
            out[f"rank{r}_energy"] = got / grand if grand > 0 else 1.0
            for comp, tot in sorted(totals.items()):
                out[f"component/{comp}/rank{r}_energy"] = captured[(comp, r)] / tot if tot > 0 else 1.0
        if cfg.lowrank_kl and approx:
            total = sum(c.numel() for c in currents.values())
            for r in ranks:
                params = {n: (approx[n][r] if n in approx else c) for n, c in currents.items()}
                kept = sum(min(r, min(c.shape)) * sum(c.shape) for n, c in currents.items() if n in approx)
                score(f"rank{r}", params, kept, total)
                out.pop(f"unchanged_ratio_at_rank{r}", None)
                out[f"params_ratio_at_rank{r}"] = out.pop(f"kept_ratio_at_rank{r}")
