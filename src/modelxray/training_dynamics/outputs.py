"""Forward a probe batch, and compare two sets of logits (pure functions).

All comparisons are token-averaged over the positions that ``mask`` marks (LM logits ``(B, T, V)``
with an attention mask), or over rows for classifier logits ``(B, C)``.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@contextmanager
def eval_mode(model: nn.Module):
    """Dropout off for a measurement, then the model's mode as it was."""
    was = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was)


def probe_inputs(batch: Any) -> tuple[tuple, dict[str, Any], torch.Tensor | None]:
    """(args, kwargs, mask) to call a model on a batch: a tensor, a dict with ``input_ids`` (and
    ``attention_mask``; ``labels`` dropped), or a dict with ``x`` (classifiers)."""
    if torch.is_tensor(batch):
        return (batch,), {}, None
    if isinstance(batch, dict):
        if "input_ids" in batch:
            kw = {"input_ids": batch["input_ids"]}
            if batch.get("attention_mask") is not None:
                kw["attention_mask"] = batch["attention_mask"]
            return (), kw, batch.get("attention_mask")
        if "x" in batch:
            return (batch["x"],), {}, None
    if isinstance(batch, (list, tuple)) and batch and torch.is_tensor(batch[0]):
        return (batch[0],), {}, None
    raise TypeError(
        f"cannot forward a probe batch of type {type(batch).__name__}: give a tensor of token ids, "
        "a dict with input_ids (and attention_mask), or a dict with x"
    )


def logits_of(output: Any) -> torch.Tensor:
    if torch.is_tensor(output):
        return output
    if hasattr(output, "logits"):
        return output.logits
    if isinstance(output, (tuple, list)):
        return output[0]
    raise TypeError(f"cannot find logits in a model output of type {type(output).__name__}")


def forward_logits(model: nn.Module, batch: Any, params: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
    """Logits of ``model`` on ``batch`` in eval mode, with ``params`` swapped in if given
    (``torch.func.functional_call``: the model's own tensors are never touched)."""
    args, kwargs, _ = probe_inputs(batch)
    device = next(model.parameters()).device
    args = tuple(a.to(device) if torch.is_tensor(a) else a for a in args)
    kwargs = {k: v.to(device) if torch.is_tensor(v) else v for k, v in kwargs.items()}
    if "input_ids" in kwargs:
        kwargs["use_cache"] = False
    with torch.no_grad(), eval_mode(model):
        if params is None:
            out = model(*args, **kwargs)
        else:
            out = torch.func.functional_call(model, params, args, kwargs, strict=False)
    return logits_of(out).float()


_ROWS = 64  # tokens per float64 chunk (64 x 49k doubles = 25 MB)


def compare_logits(full: torch.Tensor, other: torch.Tensor, mask: torch.Tensor | None = None) -> dict[str, float]:
    """``kl`` = KL(full || other) per token (nats), ``cosine`` of the logit vectors, ``mse`` of the
    logits, ``top1_agree`` = share of tokens whose argmax agrees; averaged over tokens."""
    vocab = full.shape[-1]
    a, b = full.reshape(-1, vocab).float(), other.reshape(-1, vocab).float()
    if mask is not None:
        keep = mask.reshape(-1).bool().to(a.device)
        a, b = a[keep], b[keep]
    # float64 in chunks of rows: a sparse update that keeps 97% of the change moves the output by a KL
    # of ~1e-9 nats, below float32's resolution of log-probabilities
    kl = cos = sq = 0.0
    for start in range(0, a.shape[0], _ROWS):
        x, y = a[start : start + _ROWS].double(), b[start : start + _ROWS].double()
        logp, logq = F.log_softmax(x, -1), F.log_softmax(y, -1)
        kl += float((logp.exp() * (logp - logq)).sum())
        cos += float(F.cosine_similarity(x, y, dim=-1).sum())
        sq += float(((x - y) ** 2).sum())
    n = max(a.shape[0], 1)
    return {
        "kl": kl / n,
        "cosine": cos / n,
        "mse": sq / (n * vocab),
        "top1_agree": float((a.argmax(-1) == b.argmax(-1)).float().mean()),
    }
