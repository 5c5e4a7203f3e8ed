"""quant_impact on a classifier (``subject.task == "classification"``): each strategy's quality on the
first ``eval_examples`` test examples against the unquantized model's logits (computed once).

Per strategy: ``loss`` (mean cross-entropy), ``accuracy`` (top-1 on the labels; zero-shot accuracy
for a CLIP-style classifier) with its 95% Wilson interval, ``top1_agree`` (the share of examples
whose predicted class is the unquantized model's) and ``kl`` (mean KL(unquantized || quantized)
of the class distributions, in nats). Inputs take the dtype of each model's floating-point weights,
so a cast strategy (bf16, fp16) gets inputs it can multiply."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from modelxray.analyzers.performance.classifier import _check_logits, example_inputs, input_dtype
from modelxray.core.progress import bar
from modelxray.measure.scoring import logits_of, model_device
from modelxray.metrics.measurements import wilson_interval

QUALITY_KEYS = ("loss", "accuracy", "accuracy_ci_low", "accuracy_ci_high", "kl", "top1_agree", "examples_scored")


def is_zero_shot(model: nn.Module) -> bool:
    """A CLIP/SigLIP dual encoder bound to the dataset's classes (its accuracy is zero-shot accuracy)."""
    return type(model).__name__ == "ZeroShotClassifier"


class ClassifierReference:
    """The unquantized model's log-probabilities and predictions on the evaluated test examples."""

    def __init__(self, model: nn.Module, data, n_examples: int, batch_size: int, progress: bool = False):
        n = min(int(n_examples), int(data.y_test.shape[0]))
        self.data = data
        self.x, self.y = data.x_test[:n], data.y_test[:n].long()
        self.n = n
        self.batch_size = batch_size
        logits = self.logits(model, progress, "quant_impact: reference")
        self.logprobs = torch.log_softmax(logits, -1)
        self.argmax = logits.argmax(-1)
        self.metrics = {**self._quality(logits), "top1_agree": 1.0, "kl": 0.0}

    def logits(self, model: nn.Module, progress: bool = False, desc: str = "evaluate") -> torch.Tensor:
        """(n, classes) float32 logits on the CPU, batch by batch."""
        device, dtype = model_device(model), input_dtype(model)
        out = []
        with torch.inference_mode():
            for i in bar(range(0, self.n, self.batch_size), desc=desc, enabled=progress):
                x = self.x[i : i + self.batch_size].to(device=device, dtype=dtype)
                y = self.y[i : i + self.batch_size]
                logits = logits_of(model(x)).float().cpu()
                _check_logits(logits, y, self.data)
                out.append(logits)
        return torch.cat(out)

    def _quality(self, logits: torch.Tensor) -> dict[str, float]:
        correct = int((logits.argmax(-1) == self.y).sum())
        low, high = wilson_interval(correct, self.n)
        return {
            "loss": float(F.cross_entropy(logits, self.y)),
            "accuracy": correct / self.n,
            "accuracy_ci_low": low,
            "accuracy_ci_high": high,
            "correct": float(correct),
            "examples_scored": float(self.n),
        }

    def evaluate(self, model: nn.Module, progress: bool = False, desc: str = "evaluate") -> dict[str, float]:
        """loss, accuracy (and its Wilson interval) and, against the reference, top1_agree and kl."""
        logits = self.logits(model, progress, desc)
        lp = torch.log_softmax(logits, -1)
        kl = (self.logprobs.exp() * (self.logprobs - lp)).sum(-1).clamp_min(0.0).mean()
        return {
            **self._quality(logits),
            "top1_agree": float((logits.argmax(-1) == self.argmax).float().mean()),
            "kl": float(kl),
        }

    def speed_batch(self, model: nn.Module, batch_size: int) -> torch.Tensor:
        """``batch_size`` test inputs on the model's device, in its weights' dtype."""
        return example_inputs(self.data, batch_size, model_device(model), input_dtype(model))
