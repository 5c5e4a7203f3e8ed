"""A small detector trained here to find and name the handwritten digits on the digit canvases: a
Hugging Face RT-DETR (a 4-stage ResNet, the hybrid encoder, a 2-layer deformable decoder; width 64)
that loads like any ``model=hf`` detector with its image processor.

RT-DETR rather than DETR: its queries start from the encoder's best-scoring positions and it
trains with denoised queries, so it learns in minutes on 2 cores where plain or conditional DETR
barely starts. Each step draws fresh canvases from the digits' train split (seeded by ``seed`` and
the step); the evaluation canvases (``dataset=digit_canvases``) hold test-split digits it never saw.
Seeded AdamW at a constant rate dropped tenfold for the last tenth of the steps (DETR's recipe;
a linear decay stops it early); the first run trains (a few minutes on 2 cores, with a progress bar), then the model
directory (config, weights, image processor) is kept under ``cache_dir`` keyed by every setting that
shapes it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelxray.core.errors import ConfigError
from modelxray.core.subject import LoadedModel
from modelxray.models.base import ModelSource

CACHE_FORMAT = 2  # bump when training changes, so stale cached models are not reused
STEP_SEED = 1_000_003  # canvases of step s are drawn with seed * STEP_SEED + s


@dataclass
class DigitsDetectorSource(ModelSource):
    width: int = 64  # channels of the encoder and decoder
    decoder_layers: int = 2
    heads: int = 4
    queries: int = 10  # detections per image (canvases hold up to max_digits digits)
    steps: int = 1500  # optimizer steps
    batch_size: int = 16  # canvases per step
    lr: float = 0.001  # learning rate (5% warm-up, a tenth of it for the last 10% of the steps)
    weight_decay: float = 0.0001
    seed: int = 0
    canvas_size: int = 64  # the canvases it is trained on (and its input size)
    digit_size: int = 16
    max_digits: int = 3
    test_fraction: float = 0.25  # the digits split: trained on its train part, evaluated on its test part
    split_seed: int = 0
    cache_dir: str = "~/.cache/modelxray"  # trained model directories are kept here
    use_disk_cache: bool = True  # reuse a model trained before with the same settings
    save_pretrained: str | None = None  # also copy the Hugging Face directory here (model=hf loads it)
    progress: bool = True  # a progress bar while training

    def validate(self) -> None:
        super().validate()
        self.require_positive("width", "decoder_layers", "heads", "queries", "steps", "batch_size", "lr")
        self.require_positive("canvas_size", "digit_size", "max_digits")
        self.require_non_negative("weight_decay")
        if self.width % self.heads:
            raise ConfigError("heads", f"must divide width, got width {self.width} and {self.heads} heads")
        if self.canvas_size % 32:
            raise ConfigError(
                "canvas_size", f"must be a multiple of 32 (the backbone's deepest stride), got {self.canvas_size}"
            )
        if self.digit_size > self.canvas_size:
            raise ConfigError("digit_size", f"must fit the canvas ({self.canvas_size} px), got {self.digit_size}")
        if self.queries < self.max_digits:
            raise ConfigError("queries", f"must be at least max_digits ({self.max_digits}), got {self.queries}")
        if not 0.0 < self.test_fraction < 1.0:
            raise ConfigError("test_fraction", f"must lie strictly between 0 and 1, got {self.test_fraction}")

    def settings(self) -> dict[str, Any]:
        keys = ("width", "decoder_layers", "heads", "queries", "steps", "batch_size", "lr", "weight_decay", "seed")
        scene = ("canvas_size", "digit_size", "max_digits", "test_fraction", "split_seed")
        return {k: getattr(self, k) for k in (*keys, *scene)}

    def cache_path(self) -> Path:
        from modelxray.models.trained_cache import cache_file

        return cache_file(self.cache_dir, "digits-detector", self.settings(), CACHE_FORMAT).with_suffix("")

    def load(self) -> LoadedModel:
        from modelxray.models.trained_cache import load_trained_directory

        return load_trained_directory(self, "digits-detector", self._train_into)

    def build(self):
        """The untrained detector and its image processor (seeded by the caller)."""
        from transformers import RTDetrConfig, RTDetrForObjectDetection, RTDetrImageProcessor, RTDetrResNetConfig

        w = self.width
        backbone = RTDetrResNetConfig(
            embedding_size=w // 2,
            hidden_sizes=[w // 2, w, w * 3 // 2, w * 2],
            depths=[1, 1, 1, 1],
            layer_type="basic",
            out_features=["stage2", "stage3", "stage4"],
        )
        labels = {i: str(i) for i in range(10)}
        config = RTDetrConfig(
            backbone_config=backbone,
            freeze_backbone_batch_norms=False,  # trained from scratch: its batch norms learn too
            encoder_in_channels=[w, w * 3 // 2, w * 2],
            encoder_hidden_dim=w,
            encoder_ffn_dim=2 * w,
            encoder_attention_heads=self.heads,
            d_model=w,
            decoder_in_channels=[w, w, w],
            decoder_ffn_dim=2 * w,
            decoder_attention_heads=self.heads,
            decoder_layers=self.decoder_layers,
            num_queries=self.queries,
            num_denoising=2 * self.queries,
            id2label=labels,
            label2id={v: k for k, v in labels.items()},
        )
        processor = RTDetrImageProcessor(size={"height": self.canvas_size, "width": self.canvas_size})
        return RTDetrForObjectDetection(config), processor

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
        """RT-DETR's own set-matching loss (focal classification, L1 and GIoU boxes, denoising) on
        fresh canvases every step."""
        import torch

        from modelxray.data.digit_canvases import paste_digits
        from modelxray.data.digits import load_digits_split
        from modelxray.models.trained_cache import optimize

        split = load_digits_split(self.test_fraction, self.split_seed)
        digits, side = split.x_train.view(-1, 8, 8), self.canvas_size

        def loss_of(step: int):
            grey, boxes, labels, _ = paste_digits(
                digits,
                split.y_train,
                self.batch_size,
                side,
                self.digit_size,
                self.max_digits,
                self.seed * STEP_SEED + step,
            )
            targets = []
            for b, lab in zip(boxes, labels):
                centre = (b[:, :2] + b[:, 2:]) / 2 / side
                targets.append({"class_labels": lab, "boxes": torch.cat([centre, (b[:, 2:] - b[:, :2]) / side], 1)})
            return net(pixel_values=grey.expand(-1, 3, -1, -1), labels=targets).loss

        desc = "training digits-detector (first run only)"
        return optimize(net, loss_of, self.steps, self.lr, self.weight_decay, desc, self.progress, schedule="step")
