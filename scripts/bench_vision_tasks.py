"""Benchmark: the scoring loop of each vision kind (detector, semantic segmenter, backbone) against a
bare PyTorch loop over the same batches (``net(pixel_values=x)`` under ``torch.inference_mode`` on
images normalised beforehand, nothing else).

    python scripts/bench_vision_tasks.py                       # random-weight models built here
    python scripts/bench_vision_tasks.py --size 224 --examples 32

Prints images/s of both loops and their ratio per kind (target >= 0.95). Ours includes what scoring
needs beyond the forward pass: the normalisation inside the wrapper, a detector's box decoding by its
image processor, a segmenter's upsampling and argmax, a backbone's pooling. Rounds alternate the two
loops so drifting machine load hits both.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from modelxray.data.digit_canvases import DigitCanvases
from modelxray.models.hf import HFSource


def build(root: Path, size: int) -> dict[str, Path]:
    """Random-weight models of deployed sizes: DETR (ResNet-50 from transformers, 6 + 6 layers of
    width 256), SegFormer-B0 and a DINOv2-S-shaped backbone (12 layers of width 384, patch 16), each
    with an image processor at ``size`` px."""
    from transformers import (
        BitImageProcessor,
        DetrConfig,
        DetrForObjectDetection,
        DetrImageProcessor,
        Dinov2Config,
        Dinov2Model,
        ResNetConfig,
        SegformerConfig,
        SegformerForSemanticSegmentation,
        SegformerImageProcessor,
    )

    out = {}
    labels = {i: str(i) for i in range(10)}
    detr = DetrConfig(
        use_timm_backbone=False,
        backbone_config=ResNetConfig(out_features=["stage4"]),
        use_pretrained_backbone=False,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )
    out["detr"] = root / "detr"
    DetrForObjectDetection(detr).save_pretrained(out["detr"])
    DetrImageProcessor(size={"shortest_edge": size, "longest_edge": size}).save_pretrained(out["detr"])
    out["segformer"] = root / "segformer"
    SegformerForSemanticSegmentation(SegformerConfig(num_labels=11)).save_pretrained(out["segformer"])
    SegformerImageProcessor(size={"height": size, "width": size}).save_pretrained(out["segformer"])
    out["dinov2"] = root / "dinov2"
    Dinov2Model(Dinov2Config(hidden_size=384, num_attention_heads=6, image_size=size, patch_size=16)).save_pretrained(
        out["dinov2"]
    )
    BitImageProcessor(crop_size={"height": size, "width": size}).save_pretrained(out["dinov2"])
    return out


def ours(loaded, images: torch.Tensor, batch: int) -> None:
    """What the performance analyzer runs on the images: the outputs the model's kind is scored by."""
    from types import SimpleNamespace

    subject = SimpleNamespace(model=loaded.model, processor=loaded.processor, data=SimpleNamespace(images=images))
    loaded.kind.image_outputs()(subject, batch, 100, False)


def bare(net, normalised: torch.Tensor, batch: int) -> None:
    with torch.inference_mode():
        for i in range(0, normalised.shape[0], batch):
            net(pixel_values=normalised[i : i + batch])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=128, help="image side in pixels")
    p.add_argument("--examples", type=int, default=32)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        dirs = build(Path(tmp), args.size)
        print(f"{'kind':24} {'ours img/s':>11} {'bare img/s':>11} {'ratio':>7}")
        for _name, d in dirs.items():
            loaded = HFSource(name_or_path=str(d), device="cpu").load()
            images = DigitCanvases(examples=args.examples).load(canvas_size=args.size).images
            model = loaded.model
            normalised = (images - model.mean) / model.std
            ours(loaded, images, args.batch)  # warm-up
            bare(model.net, normalised, args.batch)
            times = {"ours": [], "bare": []}
            for _ in range(args.rounds):
                start = time.perf_counter()
                ours(loaded, images, args.batch)
                times["ours"].append(time.perf_counter() - start)
                start = time.perf_counter()
                bare(model.net, normalised, args.batch)
                times["bare"].append(time.perf_counter() - start)
            o, b = (args.examples / statistics.median(times[k]) for k in ("ours", "bare"))
            print(f"{loaded.kind!s:24} {o:11.1f} {b:11.1f} {o / b:7.2f}")


if __name__ == "__main__":
    main()
