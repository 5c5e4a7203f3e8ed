"""Hugging Face detectors, semantic segmenters and vision backbones as ``pixels -> outputs`` modules.

As for image classifiers (``models/hf_vision.py``), the analyzers feed images (N, C, H, W) in
[0, 1] and the image processor's normalisation lives inside the wrapper, so perturbations stay in
pixel space. The wrapper returns the model's own output (``logits`` and ``pred_boxes`` of a
detector, per-pixel ``logits`` of a segmenter, ``pooler_output`` / ``last_hidden_state`` of a
backbone); ``measure/vision_outputs.py`` turns those into boxes, masks and embeddings. A detector
also needs its image processor, whose ``post_process_object_detection`` decodes its boxes."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from modelxray.core.subject import LoadedModel, ModelInfo
from modelxray.models.cache_only import model_kwargs
from modelxray.models.hf_vision import PixelClassifier, processor_settings

DEFAULT_IMAGE_SIZE = 64  # the digit canvases' side when neither config nor processor names a size


class PixelTaskModel(PixelClassifier):
    """``net(pixel_values=(x - mean) / std)`` for pixels ``x`` in [0, 1]; the model's output as is."""

    def forward(self, x: torch.Tensor):
        out = self.net(pixel_values=(x - self.mean.to(x)) / self.std.to(x))
        if getattr(out, "logits", None) is None and getattr(out, "masks_queries_logits", None) is not None:
            return semantic_output(out)
        return out


def semantic_output(out: Any) -> Any:
    """A mask-query segmenter's (Mask2Former, MaskFormer, EoMT) per-pixel class scores, as its image
    processor's ``post_process_semantic_segmentation`` computes them: each query's class probabilities
    (without "no object") weighting its mask's sigmoid, summed over queries. Their log stands in for
    the logits (argmax unchanged; cross-entropy on them is the pixel's negative log-score)."""
    from transformers.modeling_outputs import SemanticSegmenterOutput

    classes = out.class_queries_logits.float().softmax(-1)[..., :-1]
    masks = out.masks_queries_logits.float().sigmoid()
    scores = torch.einsum("bqc,bqhw->bchw", classes, masks)
    return SemanticSegmenterOutput(logits=scores.clamp_min(1e-6).log())


def _image_size(config: Any, processor: dict[str, Any], override: int | None) -> int:
    if override:
        return int(override)
    size = getattr(config, "image_size", None)
    if isinstance(size, (list, tuple)):
        size = size[0]
    if not size:
        size = processor.get("size")
        if size is not None and not isinstance(size, int):  # a dict, or an image processor's SizeDict
            size = getattr(size, "height", None) or (
                size.get("height") or size.get("shortest_edge") if hasattr(size, "get") else None
            )
    return int(size) if isinstance(size, int) and size <= 1024 else DEFAULT_IMAGE_SIZE


def load_vision_task(source: Any, kind: Any, path: str, kwargs: dict) -> LoadedModel:
    """The detector, segmenter or backbone at ``path`` wrapped for pixels in [0, 1], with its image
    processor (a detector's is required: it decodes the boxes)."""

    net = _model_class(kind, path, kwargs).from_pretrained(path, dtype=source.torch_dtype(), **model_kwargs(kwargs))
    processor = _image_processor(path, kwargs) if kind.needs_processor else None
    return wrap_vision_task(
        net, kind, processor_settings(path, kwargs), processor, source.image_size, source.name_or_path
    )


def _model_class(kind: Any, path: str, kwargs: dict) -> Any:
    """The Auto class of the kind; a universal segmenter (Mask2Former ...) by its own Auto class."""
    import transformers

    universal = getattr(kind, "universal_segmenters", ())
    if universal:
        config = transformers.AutoConfig.from_pretrained(path, **kwargs)
        if getattr(config, "model_type", "") in universal:
            return transformers.AutoModelForUniversalSegmentation
    return getattr(transformers, kind.auto_class)


def wrap_vision_task(
    net: nn.Module, kind: Any, settings: dict[str, Any], processor: Any, image_size: int | None, name: str
) -> LoadedModel:
    """``net`` wrapped for pixels in [0, 1]: the normalisation of ``settings`` (an image processor's
    ``image_mean``, ``image_std``, ``size``) inside, its input size from ``image_size``, the config or
    the processor."""
    from modelxray.models.hf_vision import normalisation

    channels = int(getattr(net.config, "num_channels", 3) or 3)
    size = _image_size(net.config, settings, image_size)
    mean, std, notes = normalisation(settings, channels)
    model = PixelTaskModel(net, mean, std, (channels, size, size))
    info = ModelInfo(name, "hf", "", notes=notes)
    return LoadedModel(model, None, info, kind=kind, processor=processor, image_shape=model.image_shape)


def settings_of(processor: Any) -> dict[str, Any]:
    """An in-memory image processor's ``image_mean``, ``image_std``, ``do_normalize`` and ``size``
    (what its saved ``preprocessor_config.json`` would hold), or {}."""
    if processor is None:
        return {}
    image = getattr(processor, "image_processor", processor)
    keys = ("image_mean", "image_std", "do_normalize", "size")
    return {k: getattr(image, k) for k in keys if getattr(image, k, None) is not None}


def _image_processor(path: str, kwargs: dict) -> Any:
    from transformers import AutoImageProcessor

    from modelxray.models.hf_tasks import PROCESSOR_FILE, PROCESSOR_FILES, load_part

    missing = (
        f"has no {PROCESSOR_FILE}: a detector needs its image processor "
        "(image_processor.save_pretrained(DIR) or processor.save_pretrained(DIR)), which decodes its boxes"
    )
    return load_part(AutoImageProcessor, path, kwargs, PROCESSOR_FILES, missing, "image processor")
