"""The performance analyzer on detectors, semantic segmenters and vision backbones: the task's
quality on its images, its agreement with the unquantized model when the run quantized it, and
speed per batch of images.

Quality by task, each with its uncertainty:
- detector: COCO mAP@[.5:.95] and mAP@.5 (pycocotools) against the labelled boxes, bootstrap
  standard errors over images;
- segmenter: mean IoU and pixel accuracy against the masks, bootstrap standard errors over images;
- backbone: leave-one-out k-NN accuracy of the embeddings on the images' labels (Wilson interval).
Agreement, label-free: the detections scored by mAP against the unquantized model's confident
detections (``agreement_score``; the top 5 of an image where none is that confident), the class
maps by mean IoU and pixel agreement against the unquantized maps, the embeddings by cosine drift."""

from __future__ import annotations

import torch

from modelxray.core.result import Result, RunContext
from modelxray.kinds.base import choose
from modelxray.kinds.image_features import ImageFeatures
from modelxray.kinds.object_detection import ObjectDetector
from modelxray.kinds.semantic_segmentation import SemanticSegmenter
from modelxray.kinds.table import kind_of
from modelxray.measure.classifier_reference import input_dtype
from modelxray.measure.scoring import model_device
from modelxray.measure.speed import StopRule, time_forward
from modelxray.measure.vision_outputs import vision_outputs
from modelxray.metrics.detection import coco_map
from modelxray.metrics.embeddings import cosine_drift, knn_accuracy
from modelxray.metrics.measurements import Latency, Speed
from modelxray.metrics.segmentation import segmentation_scores

FALLBACK_TOP = 5  # an image with no confident unquantized detection: its top boxes stand in as truth


def quality(cfg, subject, ctx: RunContext, result: Result) -> None:
    data, kind = subject.data, kind_of(subject)
    result.data["quality"] = {"protocol_description": data.description, "examples": data.n_examples}
    result.metrics["examples"] = float(data.n_examples)
    for what, n in (data.meta.get("dropped") or {}).items():  # labels the dataset refused to score (zero-size boxes)
        result.metrics["dropped_" + "_".join(what.replace("-", " ").split())] = float(n)
    out = vision_outputs(subject, cfg.batch_size, cfg.max_detections, ctx.progress, outputs=kind.image_outputs())
    ref = subject.reference
    scored = choose(kind, SCORED, "analyzer.performance", "scores detectors, semantic segmenters and vision backbones")
    scored.score(cfg, data, out, ref, result)
    against = None if ref is None else ref.get("label", "the unquantized model")
    s = scored.sentence(result.metrics, data.description, against)
    result.data["quality"]["sentence"] = (s if s.startswith("mAP") else s[0].upper() + s[1:]) + "."


class _Detector:
    """COCO mAP against the labelled boxes, and against the unquantized model's confident detections."""

    @staticmethod
    def score(cfg, data, out: dict, ref, result: Result) -> None:
        truth = [{"boxes": b, "labels": lab} for b, lab in zip(data.boxes, data.labels)]
        result.metrics.update(coco_map(out["detections"], truth, cfg.detection_bootstrap))
        if ref is not None:
            pseudo = _confident(ref["detections"], cfg.agreement_score)
            vs = coco_map(out["detections"], pseudo, cfg.detection_bootstrap, seed=1)
            result.metrics.update({f"unquantized_{k}": vs[k] for k in ("map", "map_se", "map_50", "map_50_se")})
        result.data["detections"] = _shown(out["detections"], cfg.shown_outputs)

    @staticmethod
    def sentence(m: dict, desc: str, against: str | None) -> str:
        s = f"mAP@[.5:.95] {m['map']:.3f} ± {m['map_se']:.3f} and mAP@.5 {m['map_50']:.3f} ± {m['map_50_se']:.3f}"
        s += f" over {int(m['objects'])} objects in {int(m['images_scored'])} images ({desc})"
        if against:
            s += f"; against the detections of {against} mAP@.5 {m['unquantized_map_50']:.3f}"
        return s


class _Segmenter:
    """Mean IoU and pixel accuracy against the masks, and against the unquantized class maps."""

    @staticmethod
    def score(cfg, data, out: dict, ref, result: Result) -> None:
        n_classes = int(max(int(data.masks.max()), int(out["class_maps"].max()))) + 1
        result.metrics.update(segmentation_scores(out["class_maps"], data.masks, n_classes, cfg.bootstrap))
        if ref is not None:
            maps = ref["class_maps"]
            n = int(max(n_classes, int(maps.max()) + 1))
            vs = segmentation_scores(out["class_maps"], maps, n, cfg.bootstrap, seed=1)
            result.metrics.update({"unquantized_miou": vs["miou"], "unquantized_miou_se": vs["miou_se"]})
            result.metrics["pixel_agree"] = vs["pixel_accuracy"]
            result.metrics["pixel_agree_se"] = vs["pixel_accuracy_se"]

    @staticmethod
    def sentence(m: dict, desc: str, against: str | None) -> str:
        s = f"mean IoU {m['miou']:.3f} ± {m['miou_se']:.3f}, pixel accuracy {m['pixel_accuracy']:.3f} ({desc})"
        if against:
            s += f"; against the masks of {against}: mean IoU {m['unquantized_miou']:.3f}, pixels agree {m['pixel_agree']:.4f}"
        return s


class _Backbone:
    """Leave-one-out k-NN accuracy of the embeddings, and their cosine drift from the unquantized ones."""

    @staticmethod
    def score(cfg, data, out: dict, ref, result: Result) -> None:
        result.metrics.update(knn_accuracy(out["embeddings"], data.image_labels, cfg.knn_k))
        result.metrics["embedding_dim"] = float(out["embeddings"].shape[1])
        if ref is not None:
            result.metrics.update(cosine_drift(out["embeddings"], ref["embeddings"]))

    @staticmethod
    def sentence(m: dict, desc: str, against: str | None) -> str:
        s = (
            f"k-NN accuracy of the embeddings {m['knn_accuracy']:.3f} (95% CI {m['knn_accuracy_ci_low']:.3f}-"
            f"{m['knn_accuracy_ci_high']:.3f}, k={int(m['knn_k'])}, leave-one-out on {desc})"
        )
        if against:
            s += f"; cosine drift from the embeddings of {against} {m['embedding_drift']:.2e} ± {m['embedding_drift_se']:.1e}"
        return s


# how each labelled-images kind's outputs are scored and said, by kind class
SCORED = {ObjectDetector: _Detector, SemanticSegmenter: _Segmenter, ImageFeatures: _Backbone}


def _confident(dets: list[dict], score: float) -> list[dict]:
    """The unquantized detections as truth: those scoring at least ``score``, else an image's top few."""
    out = []
    for d in dets:
        keep = d["scores"] >= score
        if not keep.any():
            keep = torch.arange(len(d["scores"])) < FALLBACK_TOP
        out.append({"boxes": d["boxes"][keep], "labels": d["labels"][keep]})
    return out


def _shown(dets: list[dict], n: int) -> list[dict]:
    return [
        {
            "boxes": d["boxes"][:5].round(decimals=1).tolist(),
            "scores": d["scores"][:5].tolist(),
            "labels": d["labels"][:5].tolist(),
        }
        for d in dets[:n]
    ]


def speed(cfg, subject, ctx: RunContext, result: Result) -> None:
    """Forward latency at each of ``speed_batch_sizes`` images; throughput in images/s."""
    model = subject.model
    speeds = []
    for bs in cfg.speed_batch_sizes:
        batch = _images(subject, bs)
        times = time_forward(
            model, batch, cfg.warmup, StopRule.of(cfg), ctx.progress, desc=f"performance: latency bs={bs}"
        )
        sp = Speed.of_examples(bs, tuple(batch.shape[1:]), Latency.from_values(times))
        result.record(f"speed/bs{bs}", sp)
        speeds.append(sp)
    result.tables["speed"] = [s.row() for s in speeds]
    result.data["speed"] = [s.to_dict() for s in speeds]


def _images(subject, n: int) -> torch.Tensor:
    images = subject.data.images
    idx = torch.arange(n) % int(images.shape[0])
    return images[idx].to(device=model_device(subject.model), dtype=input_dtype(subject.model))


def layer_input(subject) -> tuple:
    """The first image (batch 1) for per-module timing: the trial forward's."""
    batch = kind_of(subject).trial_inputs(subject)
    return batch, {"input_shape": list(batch.shape[1:])}
