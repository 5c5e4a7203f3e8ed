"""Evaluation windows: which tokens a model reads and which it is scored on.

Perplexity numbers are only comparable under the same protocol, so the protocol is explicit:

* ``disjoint``: consecutive non-overlapping windows of ``seq_len``; each scores its tokens 2..T
  (the first token of a window has no context). A shorter tail window is kept if it has >= 2 tokens.
* ``sliding``: strided sliding window: each window scores the next ``stride`` tokens with up to
  ``seq_len`` tokens of context. With a ``prefix`` token prepended the very first token is scored too.
* ``lm_eval_rolling``: lm-evaluation-harness's ``loglikelihood_rolling``: ``sliding`` with
  ``stride = seq_len`` and a prefix token, so every token is scored and windows overlap by one.

Targets equal to ``IGNORE`` are not scored.

Why in metrics: the protocol is part of what a perplexity means, and the scorers below the datasets
(``metrics.lm``, ``measure.scoring``, ``measure.reference``) read windows; datasets only supply the
token stream.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

IGNORE = -100
PROTOCOLS = ("disjoint", "sliding", "lm_eval_rolling")


@dataclass
class Window:
    inputs: torch.Tensor  # 1-D
    targets: torch.Tensor  # 1-D, same length, IGNORE where not scored


def disjoint_windows(ids: torch.Tensor, seq_len: int) -> list[Window]:
    out = []
    for start in range(0, ids.numel(), seq_len):
        chunk = ids[start : start + seq_len]
        if chunk.numel() < 2:
            break
        targets = torch.full_like(chunk, IGNORE)
        targets[:-1] = chunk[1:]
        out.append(Window(chunk, targets))
    return out


def sliding_windows(ids: torch.Tensor, seq_len: int, stride: int, prefix: int | None) -> list[Window]:
    if stride > seq_len:
        raise ValueError(f"stride ({stride}) must not exceed seq_len ({seq_len})")
    full = ids if prefix is None else torch.cat([torch.tensor([prefix], dtype=ids.dtype), ids])
    # full[j] is predicted from full[:j]; score j in [a, b) per window
    out = []
    a = 1
    while a < full.numel():
        b = min(a + stride, full.numel())
        length = min(seq_len, b - 1)
        inputs = full[b - 1 - length : b - 1]
        targets = full[b - length : b].clone()
        targets[: length - (b - a)] = IGNORE  # context tokens, scored by an earlier window
        out.append(Window(inputs, targets))
        a = b
    return out


def make_windows(
    ids: torch.Tensor, seq_len: int, protocol: str, stride: int | None = None, prefix: int | None = None
) -> list[Window]:
    if protocol == "disjoint":
        return disjoint_windows(ids, seq_len)
    if protocol == "sliding":
        return sliding_windows(ids, seq_len, stride or seq_len, prefix)
    if protocol == "lm_eval_rolling":
        return sliding_windows(ids, seq_len, seq_len, prefix)
    raise ValueError(f"unknown protocol {protocol!r}; expected one of {PROTOCOLS}")


def batched(windows: list[Window], batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Stack windows of equal length into (B, T) batches, in order; a length change starts a new batch."""
    i = 0
    while i < len(windows):
        length = windows[i].inputs.numel()
        j = i
        while j < len(windows) and j - i < batch_size and windows[j].inputs.numel() == length:
            j += 1
        yield (torch.stack([w.inputs for w in windows[i:j]]), torch.stack([w.targets for w in windows[i:j]]))
        i = j


def windows_from_batches(batches) -> list[Window]:
    """Windows from a user's DataLoader: each batch is a (B, T) tensor of token ids or a mapping with
    ``input_ids`` (and optionally Hugging Face style ``labels``, unshifted, -100 = ignore)."""
    out = []
    for batch in batches:
        ids = batch["input_ids"] if isinstance(batch, dict) else batch
        labels = batch.get("labels", ids) if isinstance(batch, dict) else ids
        ids, labels = torch.as_tensor(ids), torch.as_tensor(labels)
        if ids.dim() == 1:
            ids, labels = ids.unsqueeze(0), labels.unsqueeze(0)
        for row, lab in zip(ids, labels):
            targets = torch.full_like(row, IGNORE)
            targets[:-1] = lab[1:]
            out.append(Window(row, targets))
    return out


def speed_inputs(ids: torch.Tensor, batch_size: int, seq_len: int) -> torch.Tensor:
    """A (batch_size, seq_len) batch of real tokens, cycling through ``ids`` if it is short."""
    need = batch_size * seq_len
    reps = -(-need // max(ids.numel(), 1))
    return ids.repeat(reps)[:need].view(batch_size, seq_len)


def lm_eval_windows(data, batches, limit: int | None = None) -> list[Window]:
    """The windows an analyzer scores a language model on: the dataset's disjoint windows, else the
    rows of the user's DataLoader (``windows_from_batches``), the first ``limit`` of them."""
    if data is not None:
        windows = make_windows(data.ids, data.seq_len, "disjoint")
    elif batches is not None:
        windows = windows_from_batches(batches)
    else:
        raise ValueError("a language model needs token windows: a text dataset or a DataLoader of token batches")
    return windows[:limit] if limit else windows
