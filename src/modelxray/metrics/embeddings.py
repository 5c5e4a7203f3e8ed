"""What a vision backbone's embeddings are worth and how far they moved: leave-one-out k-NN accuracy
on labelled images (cosine similarity, majority vote, ties to the nearest), with a Wilson interval,
and the cosine drift of each image's embedding from the unquantized model's, with its standard
error over images."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from modelxray.metrics.measurements.quality import wilson_interval


def knn_accuracy(embeddings: torch.Tensor, labels: torch.Tensor, k: int = 5) -> dict[str, float]:
    """Leave-one-out k-NN accuracy: each image labelled by the majority of its ``k`` most similar
    other images (cosine); a tie goes to the class of the nearest among the tied."""
    z = F.normalize(embeddings.double(), dim=-1)
    sim = z @ z.T
    sim.fill_diagonal_(-math.inf)
    k = min(k, z.shape[0] - 1)
    top = sim.topk(k, dim=1).indices
    votes = labels[top]  # (n, k), nearest first
    correct = 0
    for row, true in zip(votes.tolist(), labels.tolist()):
        counts: dict[int, int] = {}
        for v in row:
            counts[v] = counts.get(v, 0) + 1
        best = max(counts.values())
        guess = next(v for v in row if counts[v] == best)  # nearest among the tied classes
        correct += int(guess == true)
    n = z.shape[0]
    low, high = wilson_interval(correct, n)
    return {"knn_accuracy": correct / n, "knn_accuracy_ci_low": low, "knn_accuracy_ci_high": high, "knn_k": k}


def cosine_drift(embeddings: torch.Tensor, reference: torch.Tensor) -> dict[str, float]:
    """1 - cos(embedding, unquantized embedding) per image: its mean, standard error and maximum."""
    d = 1.0 - F.cosine_similarity(embeddings.double(), reference.double(), dim=-1)
    n = d.numel()
    se = float(d.std(unbiased=True) / math.sqrt(n)) if n > 1 else float("nan")
    return {"embedding_drift": float(d.mean()), "embedding_drift_se": se, "embedding_drift_max": float(d.max())}
