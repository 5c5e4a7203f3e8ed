"""What a detector, a semantic segmenter or a vision backbone makes of a batch of images: boxes with
scores and labels (decoded by the model's own image processor), a class per pixel, an embedding per
image. Computed on the unquantized model (kept as the run's reference before it quantizes) and on
the model under analysis, so the analyzers can score the quantized outputs against the truth and
against the unquantized outputs."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from modelxray.core.progress import bar
from modelxray.measure.classifier_reference import input_dtype
from modelxray.measure.scoring import model_device


def _batches(images: torch.Tensor, batch_size: int):
    for i in range(0, int(images.shape[0]), batch_size):
        yield images[i : i + batch_size]


def detections(
    model: nn.Module, processor: Any, images: torch.Tensor, batch_size: int, max_detections: int, progress: bool
) -> list[dict[str, torch.Tensor]]:
    """Per image: the ``max_detections`` highest-scoring boxes (xyxy, pixels of the image), their
    scores and labels, decoded by ``processor.post_process_object_detection`` at threshold 0."""
    device, dtype = model_device(model), input_dtype(model)
    out: list[dict[str, torch.Tensor]] = []
    size = tuple(images.shape[-2:])
    with torch.inference_mode():
        for x in bar(list(_batches(images, batch_size)), desc="detections", enabled=progress):
            raw = model(x.to(device=device, dtype=dtype))
            found = processor.post_process_object_detection(
                _float(raw), threshold=0.0, target_sizes=[size] * x.shape[0]
            )
            for d in found:
                order = d["scores"].float().argsort(descending=True)[:max_detections]
                out.append({k: d[k][order].detach().float().cpu() for k in ("boxes", "scores")})
                out[-1]["labels"] = d["labels"][order].detach().long().cpu()
    return out


def _float(raw: Any) -> Any:
    """The output with its floating tensors in float32 (post-processing of a half model)."""
    for key in ("logits", "pred_boxes"):
        value = getattr(raw, key, None)
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            raw[key] = value.float()
    return raw


def class_maps(model: nn.Module, images: torch.Tensor, batch_size: int, progress: bool) -> torch.Tensor:
    """(N, H, W) the class of every pixel: the logits upsampled (bilinear) to the image, argmax."""
    device, dtype = model_device(model), input_dtype(model)
    maps = []
    with torch.inference_mode():
        for x in bar(list(_batches(images, batch_size)), desc="class maps", enabled=progress):
            logits = model(x.to(device=device, dtype=dtype)).logits.float()
            logits = F.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)
            maps.append(logits.argmax(1).cpu())
    return torch.cat(maps)


def embeddings(model: nn.Module, images: torch.Tensor, batch_size: int, progress: bool) -> torch.Tensor:
    """(N, D) one embedding per image: the backbone's ``pooler_output`` where it has one, else the
    mean of its last hidden state over positions (tokens or pixels)."""
    device, dtype = model_device(model), input_dtype(model)
    out = []
    with torch.inference_mode():
        for x in bar(list(_batches(images, batch_size)), desc="embeddings", enabled=progress):
            out.append(pooled(model(x.to(device=device, dtype=dtype))).float().cpu())
    return torch.cat(out)


def pooled(raw: Any) -> torch.Tensor:
    """(N, D) one embedding per image of a backbone's output: ``pooler_output`` where it has one,
    else the mean of the last hidden state over positions (tokens, or pixels of a feature map)."""
    value = getattr(raw, "pooler_output", None)
    if value is None:
        hidden = raw.last_hidden_state
        value = hidden.mean(dim=tuple(range(2, hidden.dim()))) if hidden.dim() == 4 else hidden.mean(1)
    return value.reshape(value.shape[0], -1)


def detection_outputs(subject: Any, batch_size: int, max_detections: int, progress: bool = False) -> dict[str, Any]:
    """A detector's outputs: its ``detections`` per image, decoded by the subject's image processor."""
    data, model = subject.data, subject.model
    return {"detections": detections(model, subject.processor, data.images, batch_size, max_detections, progress)}


def class_map_outputs(subject: Any, batch_size: int, max_detections: int, progress: bool = False) -> dict[str, Any]:
    """A semantic segmenter's outputs: its ``class_maps`` (a class per pixel)."""
    return {"class_maps": class_maps(subject.model, subject.data.images, batch_size, progress)}


def embedding_outputs(subject: Any, batch_size: int, max_detections: int, progress: bool = False) -> dict[str, Any]:
    """A vision backbone's outputs: its ``embeddings`` (one per image)."""
    return {"embeddings": embeddings(subject.model, subject.data.images, batch_size, progress)}


def vision_outputs(
    subject: Any, batch_size: int, max_detections: int, progress: bool = False, *, outputs: Any
) -> dict[str, Any]:
    """The outputs the subject's model is scored by (its reference when captured unquantized):
    ``outputs``, one of ``detection_outputs``, ``class_map_outputs`` and ``embedding_outputs``, chosen
    by the caller through the model's kind (``LabelledImagesKind.image_outputs``)."""
    return outputs(subject, batch_size, max_detections, progress)
