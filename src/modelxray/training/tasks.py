"""What the loop trains on: batches, the loss (with the forward's logits kept for callbacks), a fixed
held-out probe batch, and the held-out evaluation. One class per kind of model.

Language models train on the tokens after the evaluated span (``TokenData.train_ids``), cut into
disjoint rows of ``seq_len`` shuffled each epoch, and are evaluated on the evaluated span itself, so
training never sees an evaluated token.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from modelxray.core.errors import ConfigError
from modelxray.data.base import ClassificationData, TokenData
from modelxray.training_dynamics.outputs import eval_mode, logits_of


class StepLoss(NamedTuple):
    """A training forward: the loss to minimise, the logits (callbacks reuse them) and, for
    classifiers, the per-example losses whose mean ``loss`` is (detached; the example recorder
    reuses them instead of a second cross-entropy)."""

    loss: torch.Tensor
    logits: torch.Tensor
    example_loss: torch.Tensor | None = None


def _epochs(n: int, batch_size: int, gen: torch.Generator) -> Iterator[tuple[int, torch.Tensor]]:
    """(epoch, row indices) batches forever: a fresh seeded permutation per epoch, no partial batches."""
    epoch = 0
    while True:
        perm = torch.randperm(n, generator=gen)
        for start in range(0, n - batch_size + 1, batch_size):
            yield epoch, perm[start : start + batch_size]
        epoch += 1


@dataclass
class LMTask:
    data: TokenData
    rate_key: ClassVar[str] = "tokens_per_s"  # what its throughput counts
    follows_examples: ClassVar[bool] = False  # learning-dynamics callbacks follow labelled examples
    seq_len: int
    batch_size: int
    eval_batches: int
    seed: int = 0

    def __post_init__(self) -> None:
        ids = self.data.train_ids
        n = 0 if ids is None else ids.numel() // self.seq_len
        if n < self.batch_size:
            have = 0 if ids is None else ids.numel()
            raise ConfigError(
                "train.seq_len",
                f"only {have:,} tokens follow the evaluated span of {self.data.name}, "
                f"fewer than one batch of {self.batch_size} x {self.seq_len}; lower dataset.max_tokens, "
                "train.batch_size or train.seq_len",
            )
        self.rows = ids[: n * self.seq_len].view(n, self.seq_len)
        ev = self.data.ids
        n_eval = ev.numel() // self.seq_len
        if n_eval == 0:
            raise ConfigError(
                "train.seq_len",
                f"the evaluated span ({ev.numel()} tokens) is shorter than one row of "
                f"{self.seq_len}; raise dataset.max_tokens or lower train.seq_len",
            )
        self.eval_rows = ev[: n_eval * self.seq_len].view(n_eval, self.seq_len)

    @property
    def n_train(self) -> int:
        return self.rows.shape[0]

    def batches(self) -> Iterator[tuple[int, dict[str, torch.Tensor]]]:
        gen = torch.Generator().manual_seed(self.seed)
        for epoch, idx in _epochs(self.n_train, self.batch_size, gen):
            yield epoch, {"input_ids": self.rows[idx], "indices": idx}

    def loss(self, model: nn.Module, batch: dict) -> StepLoss:
        ids = batch["input_ids"].to(next(model.parameters()).device)
        logits = logits_of(model(input_ids=ids, use_cache=False))
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1))
        return StepLoss(loss, logits)

    def tokens(self, batch: dict) -> int:
        return int(batch["input_ids"].numel())

    def probe(self, rows: int, seq_len: int) -> dict[str, torch.Tensor]:
        """The first ``rows`` held-out rows of ``seq_len`` tokens: the same at every measurement."""
        ev = self.data.ids
        seq_len = min(seq_len, ev.numel() // max(rows, 1)) or ev.numel()
        n = min(rows, ev.numel() // seq_len)
        return {"input_ids": ev[: n * seq_len].view(n, seq_len)}

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Mean next-token loss and perplexity on the first ``eval_batches`` held-out batches."""
        rows = self.eval_rows[: self.eval_batches * self.batch_size]
        total, count = 0.0, 0
        with torch.no_grad(), eval_mode(model):
            for start in range(0, rows.shape[0], self.batch_size):
                batch = {"input_ids": rows[start : start + self.batch_size]}
                loss = self.loss(model, batch).loss
                n = batch["input_ids"][:, 1:].numel()
                total += float(loss) * n
                count += n
        mean = total / count
        return {"eval_loss": mean, "eval_perplexity": math.exp(min(mean, 700.0))}


def weights_version(model: nn.Module) -> tuple:
    """Changes whenever a parameter or buffer of ``model`` is modified in place (optimizer steps,
    running statistics, ``load_state_dict``) or replaced: with the model's identity, a key for
    results computed from its current weights."""
    return tuple((id(t), t._version) for t in (*model.parameters(), *model.buffers()))


@dataclass
class ClassificationTask:
    data: ClassificationData
    rate_key: ClassVar[str] = "examples_per_s"
    follows_examples: ClassVar[bool] = True
    batch_size: int | None  # None = full batch
    seed: int = 0
    _evaluated: dict = field(default_factory=dict, repr=False, compare=False)  # split -> (model ref, key, EvalResult)

    @property
    def n_train(self) -> int:
        return int(self.data.y_train.numel())

    def batches(self) -> Iterator[tuple[int, dict[str, torch.Tensor]]]:
        n = self.n_train
        if self.batch_size is None or self.batch_size >= n:
            idx = torch.arange(n)
            batch = {"x": self.data.x_train, "y": self.data.y_train, "indices": idx}
            epoch = 0
            while True:  # full batch: one step = one epoch
                yield epoch, batch
                epoch += 1
        gen = torch.Generator().manual_seed(self.seed)
        for epoch, idx in _epochs(n, self.batch_size, gen):
            yield epoch, {"x": self.data.x_train[idx], "y": self.data.y_train[idx], "indices": idx}

    def loss(self, model: nn.Module, batch: dict) -> StepLoss:
        """The mean of the per-example cross-entropies, which the example recorder reuses."""
        device = next(model.parameters()).device
        logits = logits_of(model(batch["x"].to(device)))
        per_example = F.cross_entropy(logits.float(), batch["y"].to(device), reduction="none")
        return StepLoss(per_example.mean(), logits, per_example.detach())

    def tokens(self, batch: dict) -> int:
        return int(batch["y"].numel())

    def probe(self, rows: int, seq_len: int) -> dict[str, torch.Tensor]:
        return {"x": self.data.x_test[:rows]}

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Loss and accuracy on the whole train and test splits."""
        out = {}
        for split in ("train", "test"):
            res = self.evaluate_split(model, split)
            out[f"{split}_loss"], out[f"{split}_accuracy"] = res.loss, res.accuracy
        return out

    def evaluate_split(self, model: nn.Module, split: str, limit: int | None = None, batch_size: int = 4096):
        """Per-example predictions and losses of the current weights on the first ``limit`` examples
        of ``split`` (:func:`modelxray.learning_dynamics.evaluation.evaluate`). The last result per split is
        kept until the weights change, so the loop's ``eval/`` pass and the memorization callback
        share one forward at steps where both run."""
        from modelxray.learning_dynamics.evaluation import evaluate

        if split not in ("train", "test"):
            raise ValueError(f"split must be train or test, got {split!r}")
        x, y = (self.data.x_train, self.data.y_train) if split == "train" else (self.data.x_test, self.data.y_test)
        if limit is not None:
            x, y = x[:limit], y[:limit]
        key = (weights_version(model), len(y))
        cached = self._evaluated.get(split)
        if cached is not None and cached[0]() is model and cached[1] == key:  # a weak reference: the same live model
            return cached[2]
        res = evaluate(model, x, y, batch_size)
        self._evaluated[split] = (weakref.ref(model), key, res)
        return res


def _lm_task(data: Any, cfg) -> LMTask:
    if not isinstance(data, TokenData):
        raise ConfigError("dataset", "train= on a language model needs a text dataset, e.g. dataset=pydoc_topics")
    return LMTask(data, cfg.seq_len, cfg.batch_size or 4, cfg.eval_batches, cfg.seed)


def _classification_task(data: Any, cfg) -> ClassificationTask:
    if not isinstance(data, ClassificationData):
        raise ConfigError("dataset", "train= on a classifier needs a classification dataset, e.g. dataset=digits")
    return ClassificationTask(data, cfg.batch_size, cfg.seed)


# what train.task names (auto: the model's own task): next-token prediction, or labels of examples
OBJECTIVES = {"causal_lm": _lm_task, "classification": _classification_task}


def make_task(objective: str | None, data: Any, cfg) -> LMTask | ClassificationTask:
    """The training task of ``objective`` (a key of ``OBJECTIVES``; None: the model's kind trains as
    none of them) on ``data``."""
    if objective not in OBJECTIVES:
        raise ConfigError("train", "trains causal language models and classifiers (train.task); this model is neither")
    return OBJECTIVES[objective](data, cfg)
