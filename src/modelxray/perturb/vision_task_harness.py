"""Evaluate perturbations of a detector, a semantic segmenter or a vision backbone by its task's own
scores: mAP against the labelled boxes (and mAP@.5 against the clean model's detections), mean IoU
against the masks (and pixel agreement with the clean class maps), k-NN accuracy of the embeddings
(and their cosine drift from the clean ones).

The image corruptions are the classifiers' (``perturb/images.py``): Gaussian pixel noise, blur and
occlusion patches, applied to the images before the model's own normalisation. Weight and
quantization noise act on the model and are scored by ``evaluate``. FGSM and PGD (``perturb/attacks.py``)
step in pixel space, inside [0, 1], to raise the task's own loss: a detector's training loss against
the labelled boxes (its set-matching loss, computed by the model from ``labels``), a segmenter's
per-pixel cross-entropy against the masks, a backbone's cosine distance from its clean embeddings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from modelxray.kinds.base import choose
from modelxray.kinds.image_features import ImageFeatures
from modelxray.kinds.object_detection import ObjectDetector
from modelxray.kinds.semantic_segmentation import SemanticSegmenter
from modelxray.kinds.table import kind_of
from modelxray.measure.vision_outputs import vision_outputs
from modelxray.metrics.detection import coco_map
from modelxray.metrics.embeddings import cosine_drift, knn_accuracy
from modelxray.metrics.segmentation import segmentation_scores
from modelxray.perturb.images import gaussian_blur, gaussian_noise, occlude, patch_positions

BOUNDS = (0.0, 1.0)  # images are pixels in [0, 1]


# -- each kind's scores against the labels (and agreement with the clean outputs, once known) -----
def _detection_scores(h: VisionTaskHarness, out: dict, d: Any, clean: dict | None) -> dict[str, float]:
    truth = [{"boxes": b, "labels": lab} for b, lab in zip(d.boxes, d.labels)]
    m = coco_map(out["detections"], truth, h.bootstrap)
    if clean is not None and out is not clean:
        pseudo = [{"boxes": c["boxes"][:5], "labels": c["labels"][:5]} for c in clean["detections"]]
        m["agree_map_50"] = coco_map(out["detections"], pseudo, 0)["map_50"]
    return m


def _segmentation_scores(h: VisionTaskHarness, out: dict, d: Any, clean: dict | None) -> dict[str, float]:
    maps = out["class_maps"]
    n = int(max(int(d.masks.max()), int(maps.max()))) + 1
    m = segmentation_scores(maps, d.masks, n, h.bootstrap)
    if clean is not None and out is not clean:
        m["pixel_agree"] = float((maps == clean["class_maps"]).double().mean())
    return m


def _embedding_scores(h: VisionTaskHarness, out: dict, d: Any, clean: dict | None) -> dict[str, float]:
    m = knn_accuracy(out["embeddings"], d.image_labels, h.knn_k)
    if clean is not None and out is not clean:
        m["embedding_drift"] = cosine_drift(out["embeddings"], clean["embeddings"])["embedding_drift"]
    return m


# -- each kind's loss, which the attacks raise: of the images ``rows`` at pixels ``x`` -------------
def _detection_loss(harness: VisionTaskHarness, model: Any, x: torch.Tensor, rows: slice, device: Any) -> torch.Tensor:
    """The detector's training loss against the labelled boxes (its set-matching loss)."""
    d, side = harness.data, x.shape[-1]
    labels = []
    for boxes, classes in zip(d.boxes[rows], d.labels[rows]):
        cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2 / side, (boxes[:, 1] + boxes[:, 3]) / 2 / side
        w, h = (boxes[:, 2] - boxes[:, 0]) / side, (boxes[:, 3] - boxes[:, 1]) / side
        box = torch.stack([cx, cy, w, h], 1).to(device)
        labels.append({"class_labels": classes.to(device), "boxes": box})
    net = model.net
    return net(pixel_values=(x - model.mean.to(x)) / model.std.to(x), labels=labels).loss


def _segmentation_loss(h: VisionTaskHarness, model: Any, x: torch.Tensor, rows: slice, device: Any) -> torch.Tensor:
    """Per-pixel cross-entropy against the masks."""
    logits = model(x).logits.float()
    logits = F.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)
    masks = h.data.masks[rows].to(device)
    unscored = (masks < 0) | (masks >= logits.shape[1])  # ignored pixels, classes the head lacks
    masks = masks.masked_fill(unscored, -100)
    return F.cross_entropy(logits, masks, ignore_index=-100)


def _embedding_loss(h: VisionTaskHarness, model: Any, x: torch.Tensor, rows: slice, device: Any) -> torch.Tensor:
    """The cosine distance of the embeddings from the clean ones."""
    from modelxray.measure.vision_outputs import pooled

    clean = h.clean_outputs["embeddings"][rows].to(device)
    return (1 - F.cosine_similarity(pooled(model(x)).float(), clean, dim=-1)).mean()


@dataclass(frozen=True)
class VisionScoring:
    """How a kind scored on labelled images is scored and attacked."""

    quality: str  # the metric every family is judged by
    quality_name: str  # ... as a sentence names it
    score: Callable[..., dict[str, float]]  # (harness, outputs, data, clean outputs or None) -> metrics
    loss: Callable[..., torch.Tensor]  # (harness, model, pixels, rows, device) -> the loss attacks raise
    # the loss has a zero gradient at the clean image (a distance from it): the first gradient is
    # taken a tiny seeded step away
    nudged: bool = False


SCORING = {
    ObjectDetector: VisionScoring("map_50", "mAP@.5", _detection_scores, _detection_loss),
    SemanticSegmenter: VisionScoring("miou", "mean IoU", _segmentation_scores, _segmentation_loss),
    ImageFeatures: VisionScoring("knn_accuracy", "k-NN accuracy", _embedding_scores, _embedding_loss, nudged=True),
}


class VisionTaskHarness:
    attack_space = "pixels"
    dropout_family = None
    substitution_family = None

    def __init__(self, subject: Any, n: int, batch_size: int, bootstrap: int, knn_k: int, occlusion_fill: str):

        data = subject.data
        self.subject = subject
        self.kind = kind_of(subject)
        self.scoring = choose(self.kind, SCORING, "model", "scores detectors, semantic segmenters and vision backbones")
        self.quality, self.quality_name = self.scoring.quality, self.scoring.quality_name
        self.batch_size, self.bootstrap, self.knn_k = batch_size, bootstrap, knn_k
        self.data = data.first(n)
        self.images = self.data.images
        self.size = int(self.images.shape[0])
        self.image_shape = tuple(self.images.shape[1:])
        self.occlusion_value = 0.5 if occlusion_fill == "mid" else 0.0
        self.clean_outputs = self._outputs(self.images)
        self.clean = self.score(self.clean_outputs)

    def _outputs(self, images: torch.Tensor, model: Any = None) -> dict:
        import dataclasses

        view = dataclasses.replace(self.subject, data=dataclasses.replace(self.data, images=images))
        if model is not None:
            view = dataclasses.replace(view, model=model)
        return vision_outputs(view, self.batch_size, 100, outputs=self.kind.image_outputs())

    def score(self, out: dict, n: int | None = None) -> dict[str, float]:
        """The task's quality against the labels, and agreement with the clean outputs once known
        (``n``: on the first ``n`` images only, whose outputs ``out`` holds)."""
        d, clean = self.data, getattr(self, "clean_outputs", None)
        if n is not None and n < self.size:
            d = d.first(n)
            clean = None if clean is None else {k: v[:n] for k, v in clean.items()}
        return self.scoring.score(self, out, d, clean)

    def evaluate_as_classifier(self, model: Any, desc: str) -> dict[str, float]:
        """``evaluate`` of ``model`` with the task's quality as ``accuracy`` and its agreement with the
        clean outputs as ``top1_agree`` (mAP@.5 against the clean top detections, pixel agreement,
        1 - cosine drift): the columns the classifier paths of quant_impact and bitwidth compare."""
        m = self.evaluate(desc, model)
        agree = m.get("agree_map_50", m.get("pixel_agree", 1.0 - m.get("embedding_drift", 0.0)))
        return {**m, "accuracy": m[self.quality], "top1_agree": agree}

    def clean_of(self, n: int) -> dict[str, float]:
        return self.clean if n >= self.size else self.score({k: v[:n] for k, v in self.clean_outputs.items()}, n)

    # -- attacks in pixel space ------------------------------------------------------------------
    eps_scale = 1.0  # pixels span [0, 1]: eps is a fraction of the range

    def attack(
        self,
        eps_list: list[float],
        steps: int,
        step_size: float | None,
        random_start: bool,
        generator: torch.Generator,
        n: int,
        desc: str,
    ) -> dict[float, dict[str, dict]]:
        """FGSM (and PGD when ``steps`` > 0) at each eps on the first ``n`` images, raising the task's
        loss; the gradient at the clean point is shared by every eps and PGD's first step."""
        from modelxray.perturb.attacks import default_step_size, fgsm, pgd
        from modelxray.perturb.embedding_shift import frozen

        adv_f: dict[float, list] = {e: [] for e in eps_list}
        adv_p: dict[float, list] = {e: [] for e in eps_list}
        model = self.subject.model
        with frozen(model):
            for start in range(0, n, self.batch_size):
                rows = slice(start, min(start + self.batch_size, n))
                xb = self.images[rows]
                grad_fn = self._grad_fn(rows)
                # a backbone's cosine distance from its clean embedding has a zero gradient at the clean
                # image: its first gradient is taken a tiny seeded step away
                nudge = 1e-3 * (torch.rand(xb.shape, generator=generator) * 2 - 1) if self.scoring.nudged else 0
                g0 = grad_fn((xb + nudge).clamp(*BOUNDS))
                for eps in eps_list:
                    adv_f[eps].append(fgsm(xb, g0, eps, BOUNDS))
                    if steps > 0:
                        size = (step_size * eps) if step_size else default_step_size(eps, steps)
                        adv_p[eps].append(pgd(xb, grad_fn, eps, steps, size, random_start, generator, BOUNDS, g0))
        out = {}
        for eps in eps_list:
            out[eps] = {"fgsm": self.score(self._outputs(torch.cat(adv_f[eps])), n)}
            if steps > 0:
                out[eps]["pgd"] = self.score(self._outputs(torch.cat(adv_p[eps])), n)
        return out

    def _grad_fn(self, rows: slice):
        """x -> d(task loss)/dx for the images ``rows``."""
        model = self.subject.model
        device = next(model.parameters()).device

        def grad(x: torch.Tensor) -> torch.Tensor:
            x = x.detach().to(device).requires_grad_(True)
            with torch.enable_grad():
                (g,) = torch.autograd.grad(self.scoring.loss(self, model, x, rows, device), x)
            return g.cpu()

        return grad

    def evaluate(self, desc: str, model: Any = None) -> dict[str, float]:
        """The model as it is now (after weight noise), or another ``model`` (a quantized copy), on
        the clean images."""
        return self.score(self._outputs(self.images, model))

    def perturb_inputs(self, family: str, level: float, generator: torch.Generator, desc: str) -> dict[str, float]:
        """Scores on the images under an image corruption at ``level`` (as ``ClassifierHarness``)."""
        x = self.images
        if family == "gaussian_noise":
            x = gaussian_noise(x, level, generator, BOUNDS)
        elif family == "blur":
            x = gaussian_blur(x, level)
        elif family == "occlusion":
            corners = patch_positions(x.shape[0], x.shape[-2], x.shape[-1], level, generator)
            x = occlude(x, level, corners, self.occlusion_value)
        else:  # pragma: no cover - the analyzer asks for the image families only
            raise ValueError(f"unknown image corruption {family!r}")
        return self.score(self._outputs(x))
