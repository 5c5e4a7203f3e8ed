"""Semantic segmentation quality from a confusion matrix: mean IoU over the classes present in the
truth or the prediction (the usual mIoU), and pixel accuracy, each with a bootstrap standard error
over images (IoU pools pixels over images, so images are the resampled unit). Truth pixels below 0
are not scored (a dataset's "ignore" pixels, or those no annotation covers)."""

from __future__ import annotations

import numpy as np
import torch


def confusions(pred: torch.Tensor, truth: torch.Tensor, n_classes: int) -> torch.Tensor:
    """(images, n_classes, n_classes) counts: [i, t, p] pixels of image i of class t predicted p;
    truth pixels below 0 are left out."""
    truth = truth.long().reshape(truth.shape[0], -1)
    scored = truth >= 0
    idx = truth.clamp(min=0) * n_classes + pred.long().reshape(pred.shape[0], -1)
    out = torch.zeros(truth.shape[0], n_classes * n_classes, dtype=torch.float64, device=truth.device)
    out.scatter_add_(1, idx, scored.to(torch.float64))
    return out.view(-1, n_classes, n_classes)


def miou_and_accuracy(conf: torch.Tensor) -> tuple[float, float]:
    """Mean IoU over classes with any truth or prediction, and pixel accuracy, of a pooled matrix."""
    inter = conf.diagonal()
    union = conf.sum(0) + conf.sum(1) - inter
    present = union > 0
    miou = float((inter[present] / union[present]).mean()) if present.any() else float("nan")
    total = float(conf.sum())
    return miou, float(inter.sum()) / total if total else float("nan")


def segmentation_scores(
    pred: torch.Tensor, truth: torch.Tensor, n_classes: int, bootstrap: int = 200, seed: int = 0
) -> dict[str, float]:
    """mIoU and pixel accuracy of ``pred`` against ``truth`` (N, H, W) class maps, with bootstrap
    standard errors over images."""
    per_image = confusions(pred, truth, n_classes)
    miou, acc = miou_and_accuracy(per_image.sum(0))
    out = {"miou": miou, "pixel_accuracy": acc, "images_scored": float(per_image.shape[0])}
    n = per_image.shape[0]
    if n < 2 or bootstrap < 2:
        out["miou_se"] = out["pixel_accuracy_se"] = float("nan")
        return out
    rng = np.random.default_rng(seed)
    draws = np.array(
        [miou_and_accuracy(per_image[torch.from_numpy(rng.integers(0, n, n))].sum(0)) for _ in range(bootstrap)]
    )
    out["miou_se"], out["pixel_accuracy_se"] = (float(v) for v in np.nanstd(draws, axis=0, ddof=1))
    return out
