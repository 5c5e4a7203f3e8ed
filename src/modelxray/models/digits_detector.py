"""A small detector trained here to find and name the handwritten digits on the digit canvases: a
Hugging Face RT-DETR (a 4-stage ResNet, the hybrid encoder, a 2-layer deformable decoder; width 64)
that loads like any ``model=hf`` detector with its image processor.

RT-DETR rather than DETR: its queries start from the encoder's best-scoring positions and it
trains with denoised queries, so it learns in minutes on 2 cores where plain or conditional DETR
barely starts. Each step draws fresh canvases from the digits' train split (seeded by ``seed`` and
the step); the evaluation canvases (``dataset=digit_canvases``) hold test-split digits it never saw.
Seeded AdamW at a constant rate dropped tenfold for the last tenth of the steps (DETR's recipe;
a linear decay stops it early). The default's model directory (config, weights, image processor)
ships with modelxray; other settings, or ``retrain=true``, train here (about 3 minutes on one core,
with a progress bar) and keep it under ``cache_dir`` keyed by every setting that shapes it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from modelxray.core.errors import ConfigError
from modelxray.models.trained_source import CanvasTrainedSource


@dataclass
class DigitsDetectorSource(CanvasTrainedSource):
    kind_of_source: ClassVar[str | None] = "object_detection"
    stem: ClassVar[str] = "digits-detector"
    seconds_per_step: ClassVar[float] = 0.12  # measured on one thread: the announced estimate, not a limit
    cache_format: ClassVar[int] = 2  # bump when training changes, so stale cached models are not reused

    width: int = 64  # channels of the encoder and decoder
    decoder_layers: int = 2
    heads: int = 4
    queries: int = 10  # detections per image (canvases hold up to max_digits digits)
    steps: int = 1500  # optimizer steps
    batch_size: int = 16  # canvases per step
    lr: float = 0.001  # learning rate (5% warm-up, a tenth of it for the last 10% of the steps)
    weight_decay: float = 0.0001

    def validate(self) -> None:
        super().validate()
        self.require_positive("width", "decoder_layers", "heads", "queries", "steps", "batch_size", "lr")
        self.require_non_negative("weight_decay")
        if self.width % self.heads:
            raise ConfigError("heads", f"must divide width, got width {self.width} and {self.heads} heads")
        if self.queries < self.max_digits:
            raise ConfigError("queries", f"must be at least max_digits ({self.max_digits}), got {self.queries}")

    def settings(self) -> dict[str, Any]:
        keys = ("width", "decoder_layers", "heads", "queries", "steps", "batch_size", "lr", "weight_decay", "seed")
        return {**{k: getattr(self, k) for k in keys}, **self.scene()}

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

    def _train(self, net: Any, processor: Any) -> float:
        """RT-DETR's own set-matching loss (focal classification, L1 and GIoU boxes, denoising) on
        fresh canvases every step."""
        import torch

        from modelxray.models.trained_cache import optimize

        draw, side = self.canvases(), self.canvas_size

        def loss_of(step: int):
            grey, boxes, labels, _ = draw(step)
            targets = []
            for b, lab in zip(boxes, labels):
                centre = (b[:, :2] + b[:, 2:]) / 2 / side
                targets.append({"class_labels": lab, "boxes": torch.cat([centre, (b[:, 2:] - b[:, :2]) / side], 1)})
            return net(pixel_values=grey.expand(-1, 3, -1, -1), labels=targets).loss

        desc = "training digits-detector"
        return optimize(net, loss_of, self.steps, self.lr, self.weight_decay, desc, self.progress, schedule="step")
