"""One batch of a user's token DataLoader, whatever common shape it has, as token ids, the mask of
the tokens that count and Hugging Face style labels.

The shapes people build:

- a ``(B, T)`` tensor (``DataLoader(ids)``), or a row ``(T,)``;
- a ``TensorDataset``'s list: ``(ids,)``, ``(ids, labels)``, ``(ids, attention_mask)``,
  ``(ids, attention_mask, labels)``;
- a mapping (a dict, a ``BatchEncoding``, a Hugging Face ``datasets`` row batch after
  ``set_format("torch")``, ``DataCollatorForLanguageModeling``'s output) with ``input_ids`` and
  optionally ``attention_mask`` and ``labels``.

A second tensor of a tuple is an attention mask when it holds only 0 and 1 (or is boolean) while the
ids do not; otherwise labels. Labels are unshifted (the label at t is the token at t; -100 is not
scored), as transformers' causal LMs take them. Anything else is refused in one line naming the shape
it got (text that is not tokenized yet, Python lists collated position by position, three tensors
none of which is a mask, float ids...), so no analyzer fails on it with a raw traceback.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from modelxray.core.errors import ConfigError

IGNORE = -100
TOKENIZE = "a language model's DataLoader yields token ids: tokenize first (tokenizer(texts, return_tensors='pt', padding=True))"
EXPECTED = (
    "a (batch, tokens) tensor of token ids, a TensorDataset's (ids,), (ids, labels), (ids, attention_mask) or "
    "(ids, attention_mask, labels), or a mapping with input_ids (and attention_mask, labels)"
)


@dataclass
class TokenBatch:
    ids: torch.Tensor  # (B, T) integer token ids
    mask: torch.Tensor  # (B, T) bool: the tokens that are there (not padding)
    labels: torch.Tensor  # (B, T) unshifted labels, IGNORE where not scored (padding included)

    def rows(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each row's (ids, labels) without its padding: a causal model reads exactly its tokens, at
        positions from 0, whichever side it was padded on."""
        return [(ids[keep], labels[keep]) for ids, labels, keep in zip(self.ids, self.labels, self.mask)]


def token_batch(batch, key: str = "dataloader") -> TokenBatch:
    """``batch`` as a TokenBatch, or a one-line ConfigError naming the shape it has."""
    if _is_text(batch):
        raise ConfigError(key, f"yields text ({describe_items(batch)}); {TOKENIZE}")
    ids, mask, labels = _parts(batch, key)
    ids = _tensor(ids, "input_ids", key)
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if ids.dim() != 2 or ids.is_floating_point() or ids.dtype == torch.bool:
        raise ConfigError(
            key,
            f"yields input ids of shape {tuple(ids.shape)} and dtype {ids.dtype}; expected integer token ids: {EXPECTED}",
        )
    mask = torch.ones_like(ids, dtype=torch.bool) if mask is None else _same(mask, ids, "attention_mask", key).bool()
    labels = ids.clone() if labels is None else _same(labels, ids, "labels", key)
    if labels.is_floating_point():
        raise ConfigError(key, f"yields float labels; a language model's labels are token ids: {EXPECTED}")
    return TokenBatch(ids.long(), mask, labels.long().masked_fill(~mask, IGNORE))


def _parts(batch, key: str):
    if isinstance(batch, Mapping):
        if "input_ids" not in batch:
            text = " (text: tokenize first)" if any(_is_text(v) for v in batch.values()) else ""
            raise ConfigError(key, f"yields a mapping with {sorted(batch)} and no input_ids{text}; expected {EXPECTED}")
        return batch["input_ids"], batch.get("attention_mask"), batch.get("labels")
    if isinstance(batch, (list, tuple)):
        parts, name = list(batch), type(batch).__name__
        if len(parts) > 3 and _collated_lists(parts):
            raise ConfigError(key, f"yields {name}s of {describe_items(parts)}: {COLLATED}")
        if not 1 <= len(parts) <= 3:
            raise ConfigError(key, f"yields {name}s of {describe_items(parts)}; expected {EXPECTED}")
        ids, rest = parts[0], parts[1:]
        mask = labels = None
        for part in rest:  # (ids, mask), (ids, labels), (ids, mask, labels)
            if mask is None and _looks_like_mask(part, ids, rest):
                mask = part
            elif labels is None:
                labels = part
            else:
                raise ConfigError(
                    key,
                    f"yields {name}s of {describe_items(parts)} and none after the ids is a 0/1 attention mask; "
                    f"expected {EXPECTED}",
                )
        return ids, mask, labels
    return batch, None, None


COLLATED = (
    "rows of Python lists, which a DataLoader collates position by position (a datasets.Dataset without "
    "set_format('torch') gives these); call dataset.set_format('torch') or give each row as a tensor"
)


def _is_text(value) -> bool:
    if isinstance(value, (str, bytes)):
        return True
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, (str, bytes)) for v in value)


def _collated_lists(parts) -> bool:
    """Rows of Python lists collated by a DataLoader: one (batch,) tensor per position."""
    return all(isinstance(p, torch.Tensor) and p.dim() == 1 for p in parts) and len({p.shape for p in parts}) == 1


def describe_items(items) -> str:
    """What a list (or tuple) of a batch holds, for a one-line error: ``2 tensors (4, 8) int64``,
    ``1 tensor (4, 1, 8, 8) float32``, ``2 str``; a single value described alone."""
    if not isinstance(items, (list, tuple)):
        return _describe(items)
    described = [_describe(v) for v in items]
    if len(set(described)) == 1 and described:
        one = described[0]
        if one.startswith("tensor "):
            return f"{len(items)} {'tensor' if len(items) == 1 else 'tensors'} {one[len('tensor ') :]}"
        return f"{len(items)} {one}"
    return f"{len(items)} items: " + ", ".join(described)


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor {tuple(value.shape)} {str(value.dtype).replace('torch.', '')}"
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__} of {len(value)}"
    return type(value).__name__


def _looks_like_mask(part, ids, rest) -> bool:
    """A 0/1 (or boolean) tensor beside ids that are not all 0 and 1; the first of two such wins."""
    try:
        part, ids = torch.as_tensor(part), torch.as_tensor(ids)
    except (TypeError, ValueError, RuntimeError):
        return False  # not a tensor: named in one line as labels (``_same``)
    if part.shape != ids.shape:
        return False
    if part.dtype == torch.bool:
        return True
    binary = bool(((part == 0) | (part == 1)).all())
    ids_binary = bool(((ids == 0) | (ids == 1)).all())
    return binary and not ids_binary if len(rest) == 1 else binary


def _tensor(value, name: str, key: str) -> torch.Tensor:
    if isinstance(value, (list, tuple)) and len(value) > 1 and _collated_lists(list(value)):
        raise ConfigError(key, f"yields {name} as a {type(value).__name__} of {describe_items(value)}: {COLLATED}")
    if _is_text(value):
        raise ConfigError(key, f"yields {name} of text ({describe_items(value)}); {TOKENIZE}")
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        raise ConfigError(key, f"yields {name} of type {type(value).__name__}; expected {EXPECTED}") from None


def _same(value, ids: torch.Tensor, name: str, key: str) -> torch.Tensor:
    t = _tensor(value, name, key)
    if t.dim() == 1 and ids.shape[0] == 1:
        t = t.unsqueeze(0)
    if t.shape != ids.shape:
        raise ConfigError(
            key,
            f"yields {name} of shape {tuple(t.shape)} for input ids of shape {tuple(ids.shape)}; a language model's "
            f"{name} has one value per token (a label per sequence is a classifier's loader)",
        )
    return t
