"""What the learning trackers accept from a user's code: DataLoader batches, model outputs and
datasets, checked once and turned into the tensors the metric functions take.

Why a module: the trackers (:mod:`modelxray.learning_dynamics.trackers`) take the user's DataLoaders,
outputs and datasets as they are. A batch of the wrong shape must fail before any work, in one
line naming what was expected (a ``ConfigError`` keyed by the argument), not deep in a forward.

A batch is ``(inputs, targets)`` or ``(inputs, targets, *extra)`` (extra items, e.g. dataset
indices, are ignored): ``inputs`` a tensor with the batch first, ``targets`` a 1-D integer tensor
of class labels of the same length. A model output is a (batch, classes) tensor, an object with a
``.logits`` tensor (Hugging Face) or a tuple whose first item is one.
"""

from __future__ import annotations

from typing import Any

import torch

from modelxray.core.errors import ConfigError

BATCH = "(inputs, targets) batches: inputs a tensor with the batch first, targets a 1-D integer tensor of class labels"


def describe(value: Any) -> str:
    """A few words on what ``value`` is, for error messages."""
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    if isinstance(value, dict):
        return f"a dict with keys {', '.join(map(str, list(value)[:6]))}"
    if isinstance(value, (tuple, list)):
        inner = ", ".join(describe(v) if isinstance(v, torch.Tensor) else type(v).__name__ for v in value[:4])
        return f"a {type(value).__name__} of {len(value)} ({inner})"
    return f"a {type(value).__name__}"


def check_targets(targets: Any, n: int | None, key: str) -> torch.Tensor:
    """``targets`` as a 1-D integer tensor of ``n`` labels (``n`` None: any length)."""
    if not isinstance(targets, torch.Tensor) or targets.dim() != 1 or targets.dtype.is_floating_point:
        raise ConfigError(key, f"must be a 1-D integer tensor of class labels, got {describe(targets)}")
    if n is not None and len(targets) != n:
        raise ConfigError(key, f"has {len(targets)} labels for a batch of {n} inputs")
    return targets


def batch_pair(batch: Any, key: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, targets)`` of one DataLoader batch, or a ConfigError naming ``key``."""
    if not isinstance(batch, (tuple, list)) or len(batch) < 2:
        raise ConfigError(key, f"must yield {BATCH}; got {describe(batch)}")
    inputs, targets = batch[0], batch[1]
    if not isinstance(inputs, torch.Tensor) or inputs.dim() == 0:
        raise ConfigError(key, f"must yield {BATCH}; the inputs are {describe(inputs)}")
    if not isinstance(targets, torch.Tensor) or targets.dim() != 1 or targets.dtype.is_floating_point:
        raise ConfigError(key, f"must yield {BATCH}; the targets are {describe(targets)}")
    if len(targets) != len(inputs):
        raise ConfigError(key, f"must yield {BATCH}; got {len(inputs)} inputs and {len(targets)} targets")
    return inputs, targets


def logits_of(output: Any, key: str = "outputs") -> torch.Tensor:
    """The (batch, classes) logits in a model's output."""
    if isinstance(output, (tuple, list)) and output:
        output = output[0]
    logits = getattr(output, "logits", output)
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2:
        raise ConfigError(key, f"must be (batch, classes) logits, got {describe(logits)}")
    return logits


def dataset_size(loader: Any) -> int | None:
    """Examples in a DataLoader's dataset (None when it has no length)."""
    try:
        return len(loader.dataset)
    except (AttributeError, TypeError):
        return None


def is_sequential(loader: Any) -> bool:
    """Whether the loader yields its dataset in order (no shuffling), so a running count gives each
    example's dataset position. A plain iterable of batches counts as sequential."""
    sampler = getattr(loader, "sampler", None)
    return sampler is None or isinstance(sampler, torch.utils.data.SequentialSampler)


def dataset_tensors(data: Any, key: str) -> tuple[torch.Tensor, torch.Tensor]:
    """All ``(x, y)`` of a map-style dataset (or a DataLoader's dataset) stacked into two tensors."""
    data = getattr(data, "dataset", data) if isinstance(data, torch.utils.data.DataLoader) else data
    if isinstance(data, torch.utils.data.TensorDataset) and len(data.tensors) >= 2:
        x, y = data.tensors[0], data.tensors[1]
    else:
        try:
            n = len(data)
            items = [data[i] for i in range(n)]
        except TypeError as e:
            raise ConfigError(
                key, f"must be a dataset of (input, label) pairs with a length, got {describe(data)}"
            ) from e
        if not items:
            raise ConfigError(key, "is empty")
        first = items[0]
        if not isinstance(first, (tuple, list)) or len(first) < 2 or not isinstance(first[0], torch.Tensor):
            raise ConfigError(
                key, f"must be a dataset of (input tensor, integer label) pairs; item 0 is {describe(first)}"
            )
        x = torch.stack([it[0] for it in items])
        y = torch.as_tensor([int(it[1]) for it in items])
    y = torch.as_tensor(y)
    if y.dim() != 1 or y.dtype.is_floating_point:
        raise ConfigError(key, f"labels must be integers, one per example; got {describe(y)}")
    return x, y.long()
