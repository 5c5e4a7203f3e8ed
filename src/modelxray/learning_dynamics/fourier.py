"""Fourier sparsity of a residue embedding and the weight norm: the grokking progress measures of
Nanda et al. 2023 ("Progress measures for grokking via mechanistic interpretability").

A network that has grokked modular arithmetic represents each residue a by cos/sin(2π k a / p)
for a few key frequencies k, so the embedding's energy concentrates on few frequencies while
weight decay shrinks the total weight norm.

``fourier_sparsity(E, top_k)``: E is (p, d), one row per residue. Take the DFT over the residue
axis, sum |F|² over the d columns per frequency, and group frequency k with p-k (a real signal
puts equal energy on both: they are one cos/sin pair); the constant (k=0) is its own group. The
sparsity is the share of the total energy in the ``top_k`` largest groups: 1.0 when the embedding
uses at most ``top_k`` frequencies; about ``top_k / (p//2 + 1)`` for a random embedding.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def frequency_energy(embedding) -> np.ndarray:
    """Energy per frequency group ``[0, 1, ..., p//2]`` (k and p-k summed) of a (p, d) embedding."""
    e = _numpy(embedding)
    if e.ndim != 2:
        raise ValueError(f"embedding must be (p residues, d), got shape {e.shape}")
    p = e.shape[0]
    power = (np.abs(np.fft.fft(e, axis=0)) ** 2).sum(axis=1)  # (p,)
    groups = np.minimum(np.arange(p), p - np.arange(p))  # k and p-k -> the same group
    return np.bincount(groups, weights=power, minlength=p // 2 + 1)


def fourier_sparsity(embedding, top_k: int = 5) -> float:
    """Share of the embedding's energy in its ``top_k`` strongest frequency groups (NaN if all zero)."""
    energy = frequency_energy(embedding)
    total = energy.sum()
    if total <= 0:
        return float("nan")
    return float(np.sort(energy)[::-1][:top_k].sum() / total)


def top_frequencies(embedding, top_k: int = 5) -> list[int]:
    """The ``top_k`` strongest frequency groups, strongest first."""
    return [int(k) for k in np.argsort(frequency_energy(embedding))[::-1][:top_k]]


def weight_norm(model: nn.Module) -> float:
    """L2 norm of all parameters together (what weight decay shrinks)."""
    with torch.no_grad():
        return float(torch.sqrt(sum((p.detach().double() ** 2).sum() for p in model.parameters())))


def _numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy()
    return np.asarray(x, np.float64)
