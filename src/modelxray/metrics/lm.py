"""Language-model quality metrics computed from logits and targets."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from modelxray.data.windows import IGNORE


def batch_token_stats(logits: torch.Tensor, targets: torch.Tensor, ks: list[int]) -> tuple[float, int, dict[int, int]]:
    """Summed NLL (nats), scored-token count and top-k hit counts for one batch.

    ``logits`` (B, T, V), ``targets`` (B, T) with ``IGNORE`` where not scored. A target is a top-k
    hit when fewer than k logits are strictly greater than its own (ties count in its favour).
    """
    mask = targets != IGNORE
    if not bool(mask.any()):
        return 0.0, 0, {k: 0 for k in ks}
    scored = logits[mask].float()  # (N, V)
    tgt = targets[mask]
    tgt_logit = scored.gather(1, tgt.unsqueeze(1))
    nll = torch.logsumexp(scored, dim=1) - tgt_logit.squeeze(1)
    rank = (scored > tgt_logit).sum(dim=1)
    hits = {k: int((rank < k).sum()) for k in ks}
    return float(nll.sum()), int(tgt.numel()), hits


@dataclass
class LMScore:
    """Accumulates batch statistics into loss, perplexity, bits per byte and top-k accuracy."""

    ks: list[int]
    nll_sum: float = 0.0
    n_tokens: int = 0
    hits: dict[int, int] = field(default_factory=dict)

    def update(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        nll, n, hits = batch_token_stats(logits, targets, self.ks)
        self.nll_sum += nll
        self.n_tokens += n
        for k, h in hits.items():
            self.hits[k] = self.hits.get(k, 0) + h

    def result(self, n_bytes: int | None = None) -> dict[str, float]:
        if self.n_tokens == 0:
            raise ValueError("no token was scored: the dataset is shorter than two tokens")
        loss = self.nll_sum / self.n_tokens
        out = {"loss": loss, "perplexity": perplexity(loss), "tokens_scored": float(self.n_tokens)}
        for k in self.ks:
            out["accuracy" if k == 1 else f"top{k}_accuracy"] = self.hits.get(k, 0) / self.n_tokens
        if n_bytes:
            out["bits_per_byte"] = bits_per_byte(self.nll_sum, n_bytes)
        return out


def perplexity(mean_nll_nats: float) -> float:
    """exp of the mean token negative log-likelihood (inf when it overflows)."""
    try:
        return math.exp(mean_nll_nats)
    except OverflowError:
        return math.inf


def bits_per_byte(nll_sum_nats: float, n_bytes: int) -> float:
    """Total negative log-likelihood in bits divided by the UTF-8 bytes it covers."""
    return nll_sum_nats / (math.log(2) * n_bytes)
