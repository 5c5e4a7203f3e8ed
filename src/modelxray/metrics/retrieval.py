"""Retrieval quality of a dual encoder (CLIP-style) and the drift of its embeddings (pure functions).

With a labelled image set and one text prompt per class, both directions of retrieval are scored on
cosine similarity of L2-normalised embeddings:

- image -> text recall@k: the share of images whose own class prompt is among the k prompts most
  similar to it (equal to top-k zero-shot accuracy);
- text -> image recall@k: the share of class prompts with at least one image of their class among
  the k images most similar to them (the usual retrieval recall with several relevant items), and
  precision@k: the share of those k images that are of the class, averaged over the prompts.

Drift compares each embedding with the unquantized model's embedding of the same input: cosine
similarity, mean with its standard error, and the smallest.
"""

from __future__ import annotations

import math

import torch


def image_to_text_recall(image: torch.Tensor, text: torch.Tensor, labels: torch.Tensor, ks: list[int]) -> dict:
    """``{k: recall}`` for each k below the number of prompts (image (N, D), text (C, D), labels (N,))."""
    sims = image.float() @ text.float().t()  # (N, C)
    ranked = sims.topk(min(max(ks), sims.shape[1]), dim=1).indices == labels[:, None]
    return {k: float(ranked[:, :k].any(1).double().mean()) for k in ks if k <= sims.shape[1]}


def text_to_image_retrieval(image: torch.Tensor, text: torch.Tensor, labels: torch.Tensor, ks: list[int]) -> dict:
    """``{k: (recall, precision)}`` for each k up to the number of images, over the prompts whose
    class has at least one image."""
    sims = text.float() @ image.float().t()  # (C, N)
    classes = [c for c in range(text.shape[0]) if bool((labels == c).any())]
    out = {}
    for k in ks:
        if k > sims.shape[1]:
            continue
        top = sims[classes].topk(k, dim=1).indices  # (C', k)
        relevant = labels[top] == torch.tensor(classes)[:, None]
        out[k] = (float(relevant.any(1).double().mean()), float(relevant.double().mean()))
    return out


def embedding_drift(reference: torch.Tensor, current: torch.Tensor) -> dict[str, float]:
    """Cosine similarity of each row with the reference's row: mean, standard error of the mean, min."""
    cos = torch.nn.functional.cosine_similarity(current.double(), reference.double(), dim=-1)
    n = int(cos.numel())
    return {
        "cosine": float(cos.mean()),
        "cosine_se": float(cos.std(unbiased=True) / math.sqrt(n)) if n > 1 else float("nan"),
        "cosine_min": float(cos.min()),
    }
