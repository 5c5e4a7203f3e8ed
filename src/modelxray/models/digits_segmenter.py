"""A small semantic segmenter trained here to label every pixel of the digit canvases with its digit
or background: a Hugging Face SegFormer (4 stages of width 32-128, an all-MLP decode head) that
loads like any ``model=hf`` segmenter. Its encoder is a vision backbone too: with
``model.kind=image_features`` its pooled features are scored by k-NN accuracy.

Each step draws fresh canvases from the digits' train split (seeded by ``seed`` and the step), with
their masks as labels (0 = background, c + 1 = digit c, as the canvases count); the evaluation
canvases (``dataset=digit_canvases``) hold test-split digits it never saw. Seeded AdamW on the
per-pixel cross-entropy, background pixels (most of a canvas) weighted down. The default's model
directory (config, weights, image processor) ships with modelxray; other settings, or
``retrain=true``, train here (about 1.5 minutes on one core, with a progress bar) and keep it under
``cache_dir``, keyed by every setting that shapes it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from modelxray.models.base import Declared
from modelxray.models.trained_source import CanvasTrainedSource

KINDS = ("semantic_segmentation", "image_features")  # what it loads as: the segmenter, or its encoder alone


@dataclass
class DigitsSegmenterSource(CanvasTrainedSource):
    stem: ClassVar[str] = "digits-segmenter"
    seconds_per_step: ClassVar[float] = 0.06  # measured on one thread: the announced estimate, not a limit
    cache_format: ClassVar[int] = 1  # bump when training changes, so stale cached models are not reused

    width: int = 32  # channels of the first stage (then 2x, 3x, 4x)
    decoder_width: int = 64  # channels of the decode head
    steps: int = 1500  # optimizer steps
    batch_size: int = 16  # canvases per step
    lr: float = 0.003  # peak learning rate (5% warm-up, then linear decay)
    background_weight: float = 0.2  # cross-entropy weight of background pixels (most of every canvas)
    weight_decay: float = 0.01
    kind: str = (
        "semantic_segmentation"  # semantic_segmentation | image_features: its encoder alone, as a vision backbone
    )

    def validate(self) -> None:
        super().validate()
        self.require_positive("width", "decoder_width", "steps", "batch_size", "lr", "background_weight")
        self.require_non_negative("weight_decay")
        self.require_choice("kind", KINDS)

    def declared(self) -> Declared:
        return Declared(self.kind)

    def settings(self) -> dict[str, Any]:
        keys = ("width", "decoder_width", "steps", "batch_size", "lr", "weight_decay", "background_weight", "seed")
        return {**{k: getattr(self, k) for k in keys}, **self.scene()}

    def build(self):
        """The untrained segmenter and its image processor (seeded by the caller)."""
        from transformers import SegformerConfig, SegformerForSemanticSegmentation, SegformerImageProcessor

        w = self.width
        labels = {0: "background", **{i + 1: str(i) for i in range(10)}}
        config = SegformerConfig(
            num_encoder_blocks=4,
            depths=[1, 1, 1, 1],
            sr_ratios=[4, 2, 1, 1],
            hidden_sizes=[w, 2 * w, 3 * w, 4 * w],
            num_attention_heads=[1, 2, 3, 4],
            mlp_ratios=[2, 2, 2, 2],
            decoder_hidden_size=self.decoder_width,
            id2label=labels,
            label2id={v: k for k, v in labels.items()},
        )
        side = self.canvas_size
        processor = SegformerImageProcessor(size={"height": side, "width": side}, do_normalize=False)
        return SegformerForSemanticSegmentation(config), processor

    def _train(self, net: Any, processor: Any) -> float:
        """Per-pixel cross-entropy of the logits upsampled to the canvas (as the scoring reads them)
        against the masks, background pixels weighted ``background_weight``; fresh canvases every step."""
        import torch
        import torch.nn.functional as F

        from modelxray.models.trained_cache import optimize

        draw, side = self.canvases(), self.canvas_size
        weights = torch.tensor([self.background_weight] + [1.0] * 10)

        def loss_of(step: int):
            grey, _, _, masks = draw(step)
            logits = net(pixel_values=grey.expand(-1, 3, -1, -1)).logits
            logits = F.interpolate(logits, size=(side, side), mode="bilinear", align_corners=False)
            return F.cross_entropy(logits, masks, weight=weights)

        desc = "training digits-segmenter"
        return optimize(net, loss_of, self.steps, self.lr, self.weight_decay, desc, self.progress)
