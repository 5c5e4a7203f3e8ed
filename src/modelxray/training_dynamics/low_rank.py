"""How much of a weight change a rank-r matrix holds (pure functions).

The share of ||dW||_F^2 captured by the best rank-r approximation is sum(s_i^2, i <= r) / sum(s_i^2)
(Eckart-Young). Exact SVD of every projection of a 135M model each interval costs seconds, so for
ranks far below the matrix size ``torch.svd_lowrank`` (randomised, Halko et al.) finds the top
singular triplets; the total is always the exact Frobenius norm, so an approximate spectrum can only
under-state the captured share, never over-state it.
"""

from __future__ import annotations

import torch


def use_lowrank(shape: tuple[int, int], max_rank: int, oversample: int, mode: str) -> bool:
    if mode == "exact":
        return False
    if mode == "lowrank":
        return True
    return (max_rank + oversample) * 2 <= min(shape)


def top_svd(
    d: torch.Tensor, max_rank: int, *, mode: str = "auto", oversample: int = 8, niter: int = 4, generator_seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """U, S, V (``d ~ U diag(S) V^T``) holding at least the top ``max_rank`` singular triplets."""
    d = d.float()
    if use_lowrank(tuple(d.shape), max_rank, oversample, mode):
        q = min(max_rank + oversample, min(d.shape))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(generator_seed)
            return torch.svd_lowrank(d, q=q, niter=niter)
    u, s, vh = torch.linalg.svd(d, full_matrices=False)
    return u, s, vh.mT


def rank_energy(s: torch.Tensor, total_sq: float, ranks: list[int]) -> dict[int, float]:
    """Share of ``total_sq`` (= ||dW||_F^2) captured by the top-r singular values, for each r."""
    if total_sq <= 0:
        return {r: 1.0 for r in ranks}
    csum = torch.cumsum(s.double() ** 2, 0)
    return {r: min(float(csum[min(r, s.numel()) - 1]) / total_sq, 1.0) for r in ranks}


def truncate(u: torch.Tensor, s: torch.Tensor, v: torch.Tensor, r: int) -> torch.Tensor:
    """The rank-r matrix U_r diag(S_r) V_r^T."""
    r = min(r, s.numel())
    return (u[:, :r] * s[:r]) @ v[:, :r].mT
