"""A classifier's unquantized outputs on the test split, computed once and compared against many
variants (quantization strategies, bit-width plans): the quality of each variant on the first
``n_examples`` test examples against its labels and against the reference's own predictions.

Per variant: ``loss`` (mean cross-entropy), ``accuracy`` (top-1 on the labels; zero-shot accuracy
for a CLIP-style classifier) with its 95% Wilson interval, ``top1_agree`` (the share of examples
whose predicted class is the reference's) and ``kl`` (mean KL(reference || variant) of the class
distributions, in nats). Inputs take the dtype of each model's floating-point weights, so a cast
variant (bf16, fp16) gets inputs it can multiply.

The model is called as ``model(x)`` on a float batch shaped ``(N, *input_shape)`` and returns logits
``(N, n_classes)`` (a tensor, or an output with ``.logits``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from modelxray.core.errors import ConfigError
from modelxray.core.progress import bar
from modelxray.measure.scoring import input_dtype, logits_of, model_device  # noqa: F401 - input_dtype re-exported
from modelxray.metrics.measurements import wilson_interval

QUALITY_KEYS = ("loss", "accuracy", "accuracy_ci_low", "accuracy_ci_high", "kl", "top1_agree", "examples_scored")


def is_zero_shot(model: nn.Module) -> bool:
    """A CLIP/SigLIP dual encoder bound to the dataset's classes (its accuracy is zero-shot accuracy)."""
    return type(model).__name__ == "ZeroShotClassifier"


def example_inputs(data, n: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """The first ``n`` test inputs, cycling through the split when it holds fewer."""
    idx = torch.arange(n) % int(data.x_test.shape[0])
    return data.x_test[idx].to(device=device, dtype=dtype)


def check_logits(logits: torch.Tensor, y: torch.Tensor, data) -> None:
    """Logits shaped (batch, classes) with a logit for every label of the dataset, else one line."""
    if logits.ndim != 2 or logits.shape[0] != y.shape[0]:
        raise ConfigError(
            "model",
            f"a classifier must return logits shaped (batch, classes); got {tuple(logits.shape)} "
            f"for a batch of {y.shape[0]} inputs shaped {tuple(data.x_test.shape[1:])}",
        )
    top = int(y.max())
    if top >= logits.shape[1]:
        raise ConfigError(
            "dataset",
            f"{data.name} has label {top} but the model gives {logits.shape[1]} logits per input",
        )


class ClassifierReference:
    """The unquantized model's log-probabilities and predictions on the evaluated test examples.

    ``max_examples`` (``evaluate``, ``metrics_of``) scores a prefix of them: a cheaper probe whose
    reference numbers are those of the same prefix."""

    def __init__(
        self,
        model: nn.Module,
        data,
        n_examples: int,
        batch_size: int,
        progress: bool = False,
        desc: str = "reference",
    ):
        n = min(int(n_examples), int(data.y_test.shape[0]))
        self.data = data
        self.x, self.y = data.x_test[:n], data.y_test[:n].long()
        self.n = n
        self.batch_size = batch_size
        logits = self.logits(model, progress, desc)
        self.logprobs = torch.log_softmax(logits, -1)
        self.argmax = logits.argmax(-1)
        self._logits = logits
        self.metrics = self.metrics_of(None)

    def logits(
        self, model: nn.Module, progress: bool = False, desc: str = "evaluate", max_examples: int | None = None
    ) -> torch.Tensor:
        """(n, classes) float32 logits on the CPU, batch by batch."""
        device, dtype = model_device(model), input_dtype(model)
        n = self._count(max_examples)
        out = []
        with torch.inference_mode():
            for i in bar(range(0, n, self.batch_size), desc=desc, enabled=progress):
                x = self.x[i : min(i + self.batch_size, n)].to(device=device, dtype=dtype)
                y = self.y[i : min(i + self.batch_size, n)]
                logits = logits_of(model(x)).float().cpu()
                check_logits(logits, y, self.data)
                out.append(logits)
        return torch.cat(out)

    def _count(self, max_examples: int | None) -> int:
        return self.n if max_examples is None else max(1, min(int(max_examples), self.n))

    def _quality(self, logits: torch.Tensor) -> dict[str, float]:
        n = logits.shape[0]
        correct = int((logits.argmax(-1) == self.y[:n]).sum())
        low, high = wilson_interval(correct, n)
        return {
            "loss": float(F.cross_entropy(logits, self.y[:n])),
            "accuracy": correct / n,
            "accuracy_ci_low": low,
            "accuracy_ci_high": high,
            "correct": float(correct),
            "examples_scored": float(n),
        }

    def metrics_of(self, max_examples: int | None = None) -> dict[str, float]:
        """The reference's own metrics on the first ``max_examples`` evaluated examples (None: all)."""
        return {**self._quality(self._logits[: self._count(max_examples)]), "top1_agree": 1.0, "kl": 0.0}

    def evaluate(
        self, model: nn.Module, progress: bool = False, desc: str = "evaluate", max_examples: int | None = None
    ) -> dict[str, float]:
        """loss, accuracy (and its Wilson interval) and, against the reference, top1_agree and kl."""
        logits = self.logits(model, progress, desc, max_examples)
        n = logits.shape[0]
        ref = self.logprobs[:n]
        lp = torch.log_softmax(logits, -1)
        kl = (ref.exp() * (ref - lp)).sum(-1).clamp_min(0.0).mean()
        return {
            **self._quality(logits),
            "top1_agree": float((logits.argmax(-1) == self.argmax[:n]).float().mean()),
            "kl": float(kl),
        }

    def speed_batch(self, model: nn.Module, batch_size: int) -> torch.Tensor:
        """``batch_size`` test inputs on the model's device, in its weights' dtype."""
        return example_inputs(self.data, batch_size, model_device(model), input_dtype(model))
