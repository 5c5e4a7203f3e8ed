"""A small semantic segmenter trained here to label every pixel of the digit canvases with its digit
or background: a Hugging Face SegFormer (4 stages of width 32-128, an all-MLP decode head) that
loads like any ``model=hf`` segmenter. Its encoder is a vision backbone too: with
``model.kind=image_features`` its pooled features are scored by k-NN accuracy.

Each step draws fresh canvases from the digits' train split (seeded by ``seed`` and the step), with
their masks as labels (0 = background, c + 1 = digit c, as the canvases count); the evaluation
canvases (``dataset=digit_canvases``) hold test-split digits it never saw. Seeded AdamW on the
per-pixel cross-entropy, background pixels (most of a canvas) weighted down. The first run trains
(two to four minutes on 2 cores, with a progress bar); the model directory (config, weights, image
processor) is then kept under ``cache_dir``, keyed by every setting that shapes it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelxray.core.errors import ConfigError
from modelxray.core.subject import LoadedModel
from modelxray.models.base import ModelSource

CACHE_FORMAT = 1  # bump when training changes, so stale cached models are not reused
STEP_SEED = 1_000_003  # canvases of step s are drawn with seed * STEP_SEED + s


@dataclass
class DigitsSegmenterSource(ModelSource):
    width: int = 32  # channels of the first stage (then 2x, 3x, 4x)
    decoder_width: int = 64  # channels of the decode head
    steps: int = 1500  # optimizer steps
    batch_size: int = 16  # canvases per step
    lr: float = 0.003  # peak learning rate (5% warm-up, then linear decay)
    background_weight: float = 0.2  # cross-entropy weight of background pixels (most of every canvas)
    weight_decay: float = 0.01
    seed: int = 0
    canvas_size: int = 64  # the canvases it is trained on (and its input size)
    digit_size: int = 16
    max_digits: int = 3
    test_fraction: float = 0.25  # the digits split: trained on its train part, evaluated on its test part
    split_seed: int = 0
    kind: str | None = None  # image_features: its encoder alone, as a vision backbone
    cache_dir: str = "~/.cache/modelxray"  # trained model directories are kept here
    use_disk_cache: bool = True  # reuse a model trained before with the same settings
    save_pretrained: str | None = None  # also copy the Hugging Face directory here (model=hf loads it)
    progress: bool = True  # a progress bar while training

    def validate(self) -> None:
        super().validate()
        self.require_positive("width", "decoder_width", "steps", "batch_size", "lr", "background_weight")
        self.require_positive("canvas_size", "digit_size", "max_digits")
        self.require_non_negative("weight_decay")
        if self.canvas_size % 32:
            raise ConfigError(
                "canvas_size", f"must be a multiple of 32 (the encoder's deepest stride), got {self.canvas_size}"
            )
        if self.digit_size > self.canvas_size:
            raise ConfigError("digit_size", f"must fit the canvas ({self.canvas_size} px), got {self.digit_size}")
        if self.kind not in (None, "semantic_segmentation", "image_features"):
            raise ConfigError(
                "kind", f"must be semantic_segmentation or image_features (its encoder), got {self.kind!r}"
            )
        if not 0.0 < self.test_fraction < 1.0:
            raise ConfigError("test_fraction", f"must lie strictly between 0 and 1, got {self.test_fraction}")

    def settings(self) -> dict[str, Any]:
        keys = ("width", "decoder_width", "steps", "batch_size", "lr", "weight_decay", "background_weight", "seed")
        scene = ("canvas_size", "digit_size", "max_digits", "test_fraction", "split_seed")
        return {k: getattr(self, k) for k in (*keys, *scene)}

    def cache_path(self) -> Path:
        from modelxray.models.trained_cache import cache_file

        return cache_file(self.cache_dir, "digits-segmenter", self.settings(), CACHE_FORMAT).with_suffix("")

    def load(self) -> LoadedModel:
        from modelxray.models.trained_cache import load_trained_directory

        return load_trained_directory(self, "digits-segmenter", self._train_into, kind=self.kind)

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

    def _train_into(self, directory: Path) -> str:
        import torch

        from modelxray.models.trained_cache import write_directory

        start = time.perf_counter()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            net, processor = self.build()
            final = self._train(net)
        write_directory(directory, net.eval(), processor)
        return (
            f"trained now: {self.steps} steps of AdamW (lr {self.lr}, seed {self.seed}) on {self.batch_size} fresh "
            f"canvases of train-split digits each, {time.perf_counter() - start:.0f} s, final training loss {final:.3f}"
        )

    def _train(self, net: Any) -> float:
        """Per-pixel cross-entropy of the logits upsampled to the canvas (as the scoring reads them)
        against the masks, background pixels weighted ``background_weight``; fresh canvases every step."""
        import torch
        import torch.nn.functional as F

        from modelxray.data.digit_canvases import paste_digits
        from modelxray.data.digits import load_digits_split
        from modelxray.models.trained_cache import optimize

        split = load_digits_split(self.test_fraction, self.split_seed)
        digits, side = split.x_train.view(-1, 8, 8), self.canvas_size

        def loss_of(step: int):
            grey, _, _, masks = paste_digits(
                digits,
                split.y_train,
                self.batch_size,
                side,
                self.digit_size,
                self.max_digits,
                self.seed * STEP_SEED + step,
            )
            logits = net(pixel_values=grey.expand(-1, 3, -1, -1)).logits
            logits = F.interpolate(logits, size=(side, side), mode="bilinear", align_corners=False)
            return F.cross_entropy(logits, masks, weight=weights)

        weights = torch.tensor([self.background_weight] + [1.0] * 10)

        desc = "training digits-segmenter (first run only)"
        return optimize(net, loss_of, self.steps, self.lr, self.weight_decay, desc, self.progress)
