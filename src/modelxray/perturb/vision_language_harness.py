"""Evaluate perturbations of a generative vision-language model on its questions about images.

Scoring is the text kinds' (``TextTaskHarness``): answer-token loss and perplexity, top-1 agreement
and KL against one clean pass. What differs is the attack: FGSM and PGD step in pixel space, in
[0, 1] pixel units (eps is a fraction of the pixel range, as for image classifiers and detectors),
to raise the loss of the reference answer. The image processor's normalisation is undone to reach
pixels and redone after each step, so the model reads its usual ``pixel_values``. The prompt's
tokens are perturbed by token substitution, as any text model's."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn

from modelxray.kinds.image_text_to_text import ImageTextToText
from modelxray.measure.scoring import forward_logits
from modelxray.metrics.windows import Window
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
            model, windows, ImageTextToText(), tokenizer, batch_size, kl_windows, progress, attack_batch_size
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

    # LMHarness.attack, on the pixels instead of an offset to the token embeddings
    attack_bounds = BOUNDS
    attack_unit = "question"

    def _attack_context(self):
        return contextlib.nullcontext()

    def _pixels(self, inputs) -> torch.Tensor:
        """The clean image's pixels (the processor's normalisation undone): where the attack starts."""
        pv = inputs["pixel_values"].float()
        return (pv * self.std.to(pv) + self.mean.to(pv)).clamp(*BOUNDS)

    _attack_start = _pixels

    def _pixel_grad_fn(self, inputs, targets: torch.Tensor):
        """pixels -> d(mean answer-token loss)/d pixels."""
        return self._grad_fn(None, inputs, targets)

    def _attack_forward(self, _ctx, inputs, pixels: torch.Tensor) -> torch.Tensor:
        return forward_logits(self.model, self._with_pixels(inputs, pixels))
