"""Per-example loss, correctness and true-class probability from logits, and a no-grad evaluation.

Why here: the memorization tracker and the loop's ``eval/`` pass need train/test accuracy and loss
of the current weights. "Loss" is the cross-entropy and "correct" is "the first maximum of the
logits is the label" everywhere: here, and in the example-dynamics recorder, which takes the same
two quantities from the training forward (its per-example losses and one ``max(dim)``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from modelxray.measure.scoring import model_device


def per_example_stats(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(loss, correct, p_true)`` per row of ``logits`` (N, C): cross-entropy, argmax == label (bool),
    and the softmax probability of the label. Computed in float32 (or float64 if given), no loops."""
    loss, pred = loss_and_prediction(logits, labels)
    return loss, pred == labels.to(pred.device).long(), torch.exp(-loss)


def loss_and_prediction(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, prediction)`` per row of ``logits`` (N, C): the cross-entropy (float32, or float64
    if given) and the first maximum's index, the argmax. What an evaluation keeps of a batch."""
    if logits.dim() != 2:
        raise ValueError(f"logits must be (N, classes), got shape {tuple(logits.shape)}")
    lg = logits.detach()
    if lg.dtype not in (torch.float32, torch.float64):
        lg = lg.float()
    labels = labels.to(lg.device).long()
    # the fused cross-entropy and max(dim).indices (first maximum, as argmax) cost 30% less than
    # log_softmax + gather + argmax: this runs after every training step
    return F.cross_entropy(lg, labels, reduction="none"), lg.max(dim=-1).indices


@dataclass
class EvalResult:
    accuracy: float
    loss: float
    predictions: torch.Tensor  # (N,) int64, on CPU
    losses: torch.Tensor  # (N,) float32 per-example cross-entropy, on CPU


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 4096) -> EvalResult:
    """Accuracy and mean cross-entropy of ``model`` on ``(x, y)`` in eval mode, without gradients.

    The model's train/eval mode is restored afterwards, so a callback may call this mid-training."""
    was_training = model.training
    device = model_device(model)
    model.eval()
    preds, losses = [], []
    try:
        for i in range(0, len(y), batch_size):
            loss, pred = loss_and_prediction(model(x[i : i + batch_size].to(device)), y[i : i + batch_size])
            preds.append(pred.cpu())
            losses.append(loss.float().cpu())
    finally:
        model.train(was_training)
    if not preds:
        empty = torch.zeros(0)
        return EvalResult(float("nan"), float("nan"), empty.long(), empty)
    pred, loss = torch.cat(preds), torch.cat(losses)
    return EvalResult(float((pred == y.cpu()).float().mean()), float(loss.mean()), pred, loss)


@torch.no_grad()
def evaluate_loader(model: nn.Module, loader, key: str = "dataloader", n_classes: int | None = None) -> EvalResult:
    """What :func:`evaluate` gives, over the ``(inputs, targets)`` batches of a DataLoader.

    The first batch is checked before any forward (:func:`modelxray.learning_dynamics.loaders.batch_pair`:
    a wrong structure fails with a ConfigError naming ``key``); ``n_classes``, when given, must be
    the width of the model's logits. Eval mode, no gradients, the model's mode restored."""
    from modelxray.core.errors import ConfigError
    from modelxray.learning_dynamics.loaders import batch_pair, logits_of

    was_training = model.training
    device = model_device(model)
    model.eval()
    preds, losses, labels = [], [], []
    try:
        for batch in loader:
            x, y = batch_pair(batch, key)
            logits = logits_of(model(x.to(device)), "model output")
            if n_classes is not None and logits.shape[1] != n_classes:
                raise ConfigError("num_classes", f"is {n_classes} but the model gives {logits.shape[1]} logits")
            loss, pred = loss_and_prediction(logits, y)
            preds.append(pred.cpu())
            losses.append(loss.float().cpu())
            labels.append(y.cpu())
    finally:
        model.train(was_training)
    if not preds:
        raise ConfigError(key, "yielded no batch")
    pred, loss, y = torch.cat(preds), torch.cat(losses), torch.cat(labels)
    return EvalResult(float((pred == y).float().mean()), float(loss.mean()), pred, loss)
