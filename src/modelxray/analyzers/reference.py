"""Reference outputs of the model under analysis, computed once and compared against many variants
(quantized, noisy, perturbed): loss, top-1 agreement and KL(reference || variant)."""
from __future__ import annotations

import torch
from torch import nn

from modelxray.data.windows import IGNORE, Window, batched
from modelxray.metrics.lm import LMScore, kl_and_agreement
from modelxray.progress import bar
from modelxray.scoring import forward_logits, model_device


class Reference:
    """Holds the reference argmax for every scored token and the reference log-probabilities of the
    first ``kl_windows`` windows (B x T x vocab floats: the memory cost of exact KL)."""

    def __init__(self, model: nn.Module, windows: list[Window], batch_size: int, kl_windows: int,
                 progress: bool = False, desc: str = "reference"):
        self.batches = list(batched(windows, batch_size))
        self.device = model_device(model)
        self.argmax: list[torch.Tensor] = []
        self.logprobs: list[torch.Tensor | None] = []
        self._scores: list[LMScore] = []  # per batch, for the reference metrics of any prefix of batches
        seen = 0
        with torch.inference_mode():
            for inputs, targets in bar(self.batches, desc=desc, enabled=progress):
                logits = forward_logits(model, inputs.to(self.device))
                score = LMScore(ks=[1])
                score.update(logits, targets.to(self.device))
                self._scores.append(score)
                self.argmax.append(logits.argmax(-1))
                keep = max(0, min(inputs.shape[0], kl_windows - seen))
                self.logprobs.append(torch.log_softmax(logits[:keep].float(), -1) if keep else None)
                seen += inputs.shape[0]
        self.metrics = self.metrics_of(None)

    def metrics_of(self, max_batches: int | None) -> dict[str, float]:
        """The reference's own metrics over the first ``max_batches`` batches (all when None)."""
        total = LMScore(ks=[1])
        for s in self._scores[:max_batches] if max_batches else self._scores:
            total.nll_sum += s.nll_sum
            total.n_tokens += s.n_tokens
            total.hits[1] = total.hits.get(1, 0) + s.hits.get(1, 0)
        return {**total.result(), "top1_agree": 1.0, "kl": 0.0}

    def evaluate(self, model: nn.Module, max_batches: int | None = None, progress: bool = False,
                 desc: str = "evaluate") -> dict[str, float]:
        """loss, perplexity, accuracy and, against the reference, top1_agree and kl (on kl windows)."""
        score = LMScore(ks=[1])
        agree = total = kl_n = 0
        kl_sum = 0.0
        batches = self.batches[:max_batches] if max_batches else self.batches
        with torch.inference_mode():
            for i, (inputs, targets) in enumerate(bar(batches, desc=desc, enabled=progress)):
                targets = targets.to(self.device)
                logits = forward_logits(model, inputs.to(self.device))
                score.update(logits, targets)
                mask = targets != IGNORE
                agree += int((logits.argmax(-1) == self.argmax[i])[mask].sum())
                total += int(mask.sum())
                ref = self.logprobs[i]
                if ref is not None:
                    k = ref.shape[0]
                    s, _, n = kl_and_agreement(ref, logits[:k], mask[:k])
                    kl_sum += s
                    kl_n += n
        out = score.result()
        out["top1_agree"] = agree / total if total else float("nan")
        out["kl"] = kl_sum / kl_n if kl_n else float("nan")
        return out
