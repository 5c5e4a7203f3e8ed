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

from modelxray.core.errors import ConfigError
from modelxray.metrics.token_batches import token_batch

IGNORE = -100
PROTOCOLS = ("disjoint", "sliding", "lm_eval_rolling")


class NamedTensors(dict):
    """The named inputs of one window or batch (``input_ids``, ``decoder_input_ids``,
    ``input_features`` ...) of a model that takes more than token ids: an encoder's masked text, a
    seq2seq model's source and target, a speech model's audio features. It answers the few tensor
    questions the scoring loops ask (``to``, ``shape`` and ``numel`` of the scored sequence, row
    slicing), so one loop serves every kind; the model is called with them by keyword."""

    primary: str = "input_ids"  # the tensor whose length is the window's: what ``shape``/``numel`` describe

    def _main(self) -> torch.Tensor:
        return self[self.primary] if self.primary in self else next(iter(self.values()))

    def to(self, *args, **kwargs) -> NamedTensors:
        return self._like({k: v.to(*args, **kwargs) for k, v in self.items()})

    @property
    def shape(self) -> torch.Size:
        return self._main().shape

    def numel(self) -> int:
        return self._main().numel()

    def dim(self) -> int:
        return self._main().dim()

    def signature(self) -> tuple:
        """Names and shapes: windows batch together only when every tensor's shape agrees."""
        return tuple((k, tuple(v.shape)) for k, v in self.items())

    def _like(self, tensors: dict) -> NamedTensors:
        out = NamedTensors(tensors)
        out.primary = self.primary
        return out

    def __getitem__(self, key):
        if isinstance(key, str):
            return dict.__getitem__(self, key)
        return self._like({k: v[key] for k, v in self.items()})  # rows of a batch

    @staticmethod
    def stack(rows: list[NamedTensors]) -> NamedTensors:
        return rows[0]._like({k: torch.stack([r[k] for r in rows]) for k in rows[0]})


@dataclass
class Window:
    inputs: torch.Tensor | NamedTensors  # 1-D token ids, or a model's named inputs for one example
    targets: torch.Tensor  # 1-D, IGNORE where not scored; aligned with the model's output positions


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


def _shape_key(window: Window) -> tuple:
    inputs = window.inputs
    key = inputs.signature() if isinstance(inputs, NamedTensors) else inputs.numel()
    return key, tuple(window.targets.shape)


def batched(windows: list[Window], batch_size: int) -> Iterator[tuple[torch.Tensor | NamedTensors, torch.Tensor]]:
    """Stack windows of equal shape into (B, T) batches, in order; a shape change starts a new batch."""
    i = 0
    while i < len(windows):
        key = _shape_key(windows[i])
        j = i
        while j < len(windows) and j - i < batch_size and _shape_key(windows[j]) == key:
            j += 1
        rows = [w.inputs for w in windows[i:j]]
        inputs = NamedTensors.stack(rows) if isinstance(rows[0], NamedTensors) else torch.stack(rows)
        yield inputs, torch.stack([w.targets for w in windows[i:j]])
        i = j


def stack_inputs(windows: list[Window], batch_size: int) -> torch.Tensor | NamedTensors:
    """The inputs of the first ``batch_size`` windows of the first window's shape, cycling through
    them when there are fewer: a batch of real examples to time a model on."""
    key = _shape_key(windows[0])
    same = [w.inputs for w in windows if _shape_key(w) == key]
    rows = [same[i % len(same)] for i in range(batch_size)]
    return NamedTensors.stack(rows) if isinstance(rows[0], NamedTensors) else torch.stack(rows)


def windows_from_batches(batches, key: str = "dataloader") -> list[Window]:
    """Windows from a user's DataLoader of token batches, one per row without its padding, in any
    common shape (``metrics.token_batches``); a row of fewer than two tokens scores nothing and is
    left out."""
    out = []
    for batch in batches:
        for row, labels in token_batch(batch, key).rows():
            if row.numel() < 2:
                continue
            targets = torch.full_like(row, IGNORE)
            targets[:-1] = labels[1:]
            out.append(Window(row, targets))
    if not out:
        raise ConfigError(key, "yields no sequence of two or more tokens: nothing a language model can be scored on")
    return out


def speed_inputs(ids: torch.Tensor, batch_size: int, seq_len: int) -> torch.Tensor:
    """A (batch_size, seq_len) batch of real tokens, cycling through ``ids`` if it is short."""
    need = batch_size * seq_len
    reps = -(-need // max(ids.numel(), 1))
    return ids.repeat(reps)[:need].view(batch_size, seq_len)


def lm_eval_windows(data, batches, limit: int | None = None) -> list[Window]:
    """The windows an analyzer scores a language model on: the dataset's disjoint windows, else the
    rows of the user's DataLoader (``windows_from_batches``), the first ``limit`` of them."""
    if data is not None and hasattr(data, "windows"):  # a task's own examples (encoders, seq2seq, speech)
        windows = data.windows
    elif data is not None:
        windows = make_windows(data.ids, data.seq_len, "disjoint")
    elif batches is not None:
        windows = windows_from_batches(batches)
    else:
        raise ValueError("a language model needs token windows: a text dataset or a DataLoader of token batches")
    return windows[:limit] if limit else windows
