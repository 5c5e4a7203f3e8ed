"""COCO mean average precision of detections, with pycocotools (the reference implementation of the
COCO metric), and a bootstrap standard error over images.

``coco_map`` takes per-image detections (boxes xyxy in pixels, scores, labels) and ground truth
(boxes, labels) and returns mAP@[.5:.95] (``map``) and mAP@.5 (``map_50``). mAP is a corpus
statistic (precision-recall curves pooled over images), so its standard error is a seeded bootstrap
over images: each resample re-runs the COCO evaluation on the drawn images."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import torch

Detections = list[dict[str, torch.Tensor]]  # per image: boxes (k, 4) xyxy, scores (k,), labels (k,)
Truth = list[dict[str, torch.Tensor]]  # per image: boxes (k, 4) xyxy, labels (k,)


def _coco(preds: Detections, truth: Truth, images: list[int]):
    from pycocotools.coco import COCO

    gt, dt, cats = COCO(), [], set()
    anns, imgs = [], []
    for new_id, i in enumerate(images, start=1):
        imgs.append({"id": new_id})
        for box, label in zip(truth[i]["boxes"].tolist(), truth[i]["labels"].tolist()):
            x0, y0, x1, y1 = box
            w, h = max(x1 - x0, 0.0), max(y1 - y0, 0.0)
            anns.append(
                {
                    "id": len(anns) + 1,
                    "image_id": new_id,
                    "category_id": int(label),
                    "bbox": [x0, y0, w, h],
                    "area": w * h,
                    "iscrowd": 0,
                }
            )
            cats.add(int(label))
        p = preds[i]
        for box, score, label in zip(p["boxes"].tolist(), p["scores"].tolist(), p["labels"].tolist()):
            x0, y0, x1, y1 = box
            dt.append([new_id, x0, y0, max(x1 - x0, 0.0), max(y1 - y0, 0.0), score, int(label)])
            cats.add(int(label))
    gt.dataset = {"images": imgs, "annotations": anns, "categories": [{"id": c} for c in sorted(cats)]}
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
        detections = gt.loadRes(np.array(dt, dtype=np.float64)) if dt else None
    return gt, detections


def _map(preds: Detections, truth: Truth, images: list[int]) -> tuple[float, float]:
    from pycocotools.cocoeval import COCOeval

    gt, dt = _coco(preds, truth, images)
    if dt is None or not gt.dataset["annotations"]:
        return 0.0, 0.0
    with contextlib.redirect_stdout(io.StringIO()):
        ev = COCOeval(gt, dt, "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return max(float(ev.stats[0]), 0.0), max(float(ev.stats[1]), 0.0)  # -1: no ground truth at all


def coco_map(preds: Detections, truth: Truth, bootstrap: int = 100, seed: int = 0) -> dict[str, float]:
    """mAP@[.5:.95] and mAP@.5 of ``preds`` against ``truth`` (the same images, in order), each with
    a bootstrap standard error over images (``bootstrap`` resamples, seeded; NaN below 2 images)."""
    n = len(truth)
    full = _map(preds, truth, list(range(n)))
    out = {"map": full[0], "map_50": full[1], "images_scored": float(n)}
    out["objects"] = float(sum(len(t["labels"]) for t in truth))
    if n < 2 or bootstrap < 2:
        out["map_se"] = out["map_50_se"] = float("nan")
        return out
    rng = np.random.default_rng(seed)
    draws = np.array([_map(preds, truth, rng.integers(0, n, n).tolist()) for _ in range(bootstrap)])
    out["map_se"], out["map_50_se"] = (float(v) for v in draws.std(axis=0, ddof=1))
    return out
