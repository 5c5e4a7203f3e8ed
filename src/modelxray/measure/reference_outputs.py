"""The unquantized model's outputs, kept before a run quantizes it, so the analyzers can say how far
quantization moved them: a classifier's logits on the whole test split (and a dual encoder's image
and text embeddings), a generic model's outputs on its example inputs. All are small (examples x
classes or embedding width, or one batch of outputs)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from modelxray.measure.classifier_reference import input_dtype
from modelxray.measure.scoring import logits_of, model_device

# test examples per forward pass while capturing a classifier's logits: memory only, the logits are
# the same at any batch size
CAPTURE_BATCH = 256


def classifier_logits(model: nn.Module, x: torch.Tensor, batch_size: int = CAPTURE_BATCH) -> torch.Tensor:
    """(N, classes) float32 logits on the CPU for inputs ``x`` (N, ...), batch by batch."""
    device, dtype = model_device(model), input_dtype(model)
    out = []
    with torch.inference_mode():
        for i in range(0, int(x.shape[0]), batch_size):
            out.append(logits_of(model(x[i : i + batch_size].to(device=device, dtype=dtype))).float().cpu())
    return torch.cat(out)


def is_dual_encoder(model: nn.Module) -> bool:
    """A CLIP-style classifier that exposes both towers' embeddings (``ZeroShotClassifier``)."""
    return callable(getattr(model, "image_embeddings", None)) and callable(getattr(model, "text_embeddings", None))


def dual_encoder_embeddings(model: nn.Module, x: torch.Tensor, batch_size: int = CAPTURE_BATCH) -> dict:
    """L2-normalised ``image_embeddings`` of inputs ``x`` (N, D) and the class prompts'
    ``text_embeddings`` (C, D), float32 on the CPU."""
    device, dtype = model_device(model), input_dtype(model)
    with torch.inference_mode():
        images = [
            model.image_embeddings(x[i : i + batch_size].to(device=device, dtype=dtype)).float().cpu()
            for i in range(0, int(x.shape[0]), batch_size)
        ]
        text = model.text_embeddings().float().cpu()
    return {"image_embeddings": torch.cat(images), "text_embeddings": text}


def detached(output: Any) -> Any:
    """A model output with every tensor detached and on the CPU (dicts, tuples and ModelOutputs kept)."""
    if isinstance(output, torch.Tensor):
        return output.detach().cpu()
    if isinstance(output, dict) or hasattr(output, "items"):
        return {k: detached(v) for k, v in output.items()}
    if isinstance(output, (tuple, list)):
        return tuple(detached(v) for v in output)
    return output


def generic_outputs(model: nn.Module, inputs: dict[str, torch.Tensor]) -> Any:
    """The model's outputs on named example inputs (passed by keyword), detached on the CPU."""
    with torch.inference_mode():
        return detached(model(**inputs))


def capture(subject, performance: Any = None, windows: list | None = None, progress: bool = False, *, work: Any) -> Any:
    """What ``subject.reference`` holds for its model, or ``None`` for models that keep none here
    (``performance``: the performance analyzer's settings; ``windows``: a language model's scored
    windows). ``work``: what to compute, ``work(subject, performance, windows, progress)``, chosen by
    the caller through the model's kind (``Kind.reference_work``): one of ``lm_reference``,
    ``classifier_reference``, ``generic_reference``, ``task_reference`` or ``vision_reference`` (the
    last two with their ``outputs`` bound); None keeps nothing."""
    return None if work is None else work(subject, performance, windows, progress)


def lm_reference(subject, performance: Any, windows: list | None = None, progress: bool = False) -> Any:
    """A language model's ``Reference`` on its scored ``windows`` (None without windows)."""
    if windows is None:
        return None
    from modelxray.measure.reference import Reference

    return Reference(subject.model, windows, performance.batch_size, performance.kl_windows, progress, "reference")


def classifier_reference(subject, performance: Any = None, windows: Any = None, progress: bool = False) -> Any:
    """A classifier's logits on the whole test split, and a dual encoder's image and text embeddings
    (None without a test split)."""
    if not hasattr(subject.data, "x_test"):
        return None
    ref = {"logits": classifier_logits(subject.model, subject.data.x_test)}
    if is_dual_encoder(subject.model):
        ref.update(dual_encoder_embeddings(subject.model, subject.data.x_test))
    return ref


def generic_reference(subject, performance: Any = None, windows: Any = None, progress: bool = False) -> Any:
    """A generic model's outputs on its example inputs (None without them)."""
    if subject.data is None:
        return None
    return generic_outputs(subject.model, subject.data.tensors)


def task_reference(subject, performance: Any, windows: Any = None, progress: bool = False, *, outputs: Any) -> Any:
    """A text, speech or vision-language model's ``TaskReference`` (``measure.task_outputs``) with
    ``outputs`` (``answer_outputs``, ``transcript_outputs`` or ``generated_outputs``); None without
    its examples."""
    if not hasattr(subject.data, "windows"):
        return None
    from modelxray.measure.task_outputs import capture_task

    return capture_task(subject, performance, outputs, progress)


def vision_reference(subject, performance: Any, windows: Any = None, progress: bool = False, *, outputs: Any) -> Any:
    """A detector's, segmenter's or backbone's ``outputs`` (``measure.vision_outputs``) on its images."""
    from modelxray.measure.vision_outputs import vision_outputs

    return vision_outputs(subject, performance.batch_size, performance.max_detections, outputs=outputs)
