"""Evaluate perturbations of a generative vision-language model on its questions about images.

Scoring is the text kinds' (``TextTaskHarness``): answer-token loss and perplexity, top-1 agreement
and KL against one clean pass. What differs is the attack: FGSM and PGD step in pixel space, in
[0, 1] pixel units (eps is a fraction of the pixel range, as for image classifiers and detectors),
to raise the loss of the reference answer. The image processor's normalisation is undone to reach
pixels and redone after each step, so the model reads its usual ``pixel_values``. The prompt's
tokens are perturbed by token substitution, as any text model's."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from modelxray.core.progress import bar
from modelxray.measure.scoring import forward_logits
from modelxray.metrics.windows import IGNORE, Window
from modelxray.perturb.attacks import default_step_size, fgsm, pgd
from modelxray.perturb.embedding_shift import frozen
from modelxray.perturb.text_task_harness import TextTaskHarness

BOUNDS = (0.0, 1.0)  # pixels


def image_token_ids(model: nn.Module, tokenizer) -> torch.Tensor:
    """The ids token substitution must neither replace nor insert: the image placeholder (its count
    must match the image's features) and every token added to the tokenizer (Idefics3's tile rows
    and columns, PaliGemma's location tokens)."""
    config = getattr(model, "config", None)
    ids = {getattr(config, k, None) for k in ("image_token_id", "image_token_index")}
    ids |= set(getattr(tokenizer, "added_tokens_decoder", {}) or {})
    return torch.tensor(sorted(i for i in ids if isinstance(i, int) and i >= 0), dtype=torch.long)


class VisionLanguageHarness(TextTaskHarness):
    attack_space = "pixels"

    def __init__(
        self,
        model: nn.Module,
        windows: list[Window],
        tokenizer,
        processor: Any,
        batch_size: int,
        kl_windows: int,
        progress: bool = True,
        attack_batch_size: int = 1,
    ):
        from modelxray.models.hf_vision import normalisation
        from modelxray.models.hf_vision_tasks import settings_of

        super().__init__(
            model, windows, "image_text_to_text", tokenizer, batch_size, kl_windows, progress, attack_batch_size
        )
        self.protected = torch.cat([self.protected, image_token_ids(model, tokenizer)]).unique()
        channels = int(windows[0].inputs["pixel_values"].shape[-3])
        mean, std, _ = normalisation(settings_of(processor), channels)
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    @property
    def eps_scale(self) -> float:
        """Attack radii are in pixel units: images are pixels in [0, 1]."""
        return 1.0

    def _with_pixels(self, inputs, pixels: torch.Tensor):
        pv = inputs["pixel_values"]
        normalised = (pixels - self.mean.to(pixels)) / self.std.to(pixels)
        return inputs._like({**inputs, "pixel_values": normalised.to(pv.dtype)})

    def _pixels(self, inputs) -> torch.Tensor:
        pv = inputs["pixel_values"].float()
        return (pv * self.std.to(pv) + self.mean.to(pv)).clamp(*BOUNDS)

    def attack(
        self,
        eps_list: list[float],
        steps: int,
        step_size: float | None,
        random_start: bool,
        generator: torch.Generator,
        n_windows: int,
        desc: str,
    ) -> dict[float, dict[str, dict]]:
        """FGSM (and PGD when ``steps`` > 0) in pixel space at each eps on the first ``n_windows``
        questions, raising the reference answer's loss; the gradient at the clean image is shared by
        every eps and PGD's first step."""
        fg = {e: self.ref.comparison() for e in eps_list}
        pg = {e: self.ref.comparison() for e in eps_list} if steps > 0 else {}
        left = n_windows
        total = sum(min(b[0].shape[0], max(0, n_windows - i * self.batch_size)) for i, b in enumerate(self.ref.batches))
        with frozen(self.model), bar(total=total, desc=desc, unit="question", enabled=self.progress) as pbar:
            for i, (inputs, targets) in enumerate(self.ref.batches):
                if left <= 0:
                    break
                rows = min(inputs.shape[0], left)
                left -= rows
                inputs, targets = inputs[:rows].to(self.ref.device), targets[:rows].to(self.ref.device)
                x0 = self._pixels(inputs)
                grad_fn = self._pixel_grad_fn(inputs, targets)
                g0 = grad_fn(x0)
                for eps in eps_list:
                    fg[eps].add(i, self._logits_at(inputs, fgsm(x0, g0, eps, BOUNDS)), targets)
                    if steps > 0:
                        size = (step_size * eps) if step_size else default_step_size(eps, steps)
                        x = pgd(x0, grad_fn, eps, steps, size, random_start, generator, BOUNDS, g0)
                        pg[eps].add(i, self._logits_at(inputs, x), targets)
                pbar.update(rows)
        return {e: {"fgsm": fg[e].result(), **({"pgd": pg[e].result()} if steps > 0 else {})} for e in eps_list}

    def _logits_at(self, inputs, pixels: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return forward_logits(self.model, self._with_pixels(inputs, pixels))

    def _pixel_grad_fn(self, inputs, targets: torch.Tensor):
        """pixels -> d(mean answer-token loss)/d pixels, ``attack_batch_size`` questions at a time,
        each part's summed loss over the batch's scored tokens (so the parts are the rows of the
        whole batch's gradient)."""
        scored = (targets != IGNORE).sum().clamp_min(1)
        step = self.attack_batch_size

        def grad(pixels: torch.Tensor) -> torch.Tensor:
            parts = []
            for start in range(0, pixels.shape[0], step):
                rows = slice(start, start + step)
                x = pixels[rows].detach().requires_grad_(True)
                with torch.enable_grad():
                    logits = forward_logits(self.model, self._with_pixels(inputs[rows], x)).float()
                    loss = F.cross_entropy(
                        logits.reshape(-1, logits.shape[-1]),
                        targets[rows].reshape(-1),
                        ignore_index=IGNORE,
                        reduction="sum",
                    )
                    (g,) = torch.autograd.grad(loss / scored, x)
                parts.append(g)
            return torch.cat(parts)

        return grad
