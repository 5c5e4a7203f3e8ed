"""Which kind of model a Hugging Face config describes, from its ``model_type`` and ``architectures``.

A kind decides how inputs are built, which datasets fit and what quality means:

- ``causal_lm``: next-token prediction on token windows (task ``causal_lm``);
- ``image_classification``: pixels in, class logits out (task ``classification``);
- ``vision_language``: CLIP-style dual encoders (``CLIPModel``, ``SiglipModel``): zero-shot image
  classification by class-name prompts (task ``classification``, ``models/vision_language.py``);
- ``generic``: any other module, on named example inputs the user declares (task ``generic``,
  ``models/generic.py``); chosen by ``model.kind``, never guessed from a config.

transformers' own auto-class tables decide, so every architecture they know is classified the way
``AutoModelFor...`` would load it.
"""

from __future__ import annotations

from typing import Any

from modelxray.core.errors import ConfigError

KINDS = ("auto", "causal_lm", "image_classification", "vision_language")  # what model=hf loads (generic: model=file)
TASK_OF_KIND = {"causal_lm": "causal_lm", "image_classification": "classification", "vision_language": "classification"}


def kind_of_config(config: Any, name: str) -> str:
    """The kind of the model ``config`` describes, or a one-line ConfigError naming its architecture."""
    from transformers.models.auto import modeling_auto as auto

    model_type = getattr(config, "model_type", "")
    arch = ", ".join(getattr(config, "architectures", None) or []) or model_type or "unknown"
    archs = getattr(config, "architectures", None) or []
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return "causal_lm"
    if any(a.endswith("ForImageClassification") for a in archs):
        return "image_classification"
    zero_shot = auto.MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES
    if model_type in zero_shot or any(a.endswith(("CLIPModel", "SiglipModel")) for a in archs):
        return "vision_language"
    if not archs and model_type in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return "causal_lm"
    if not archs and model_type in auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES:
        return "image_classification"
    raise ConfigError(
        "model",
        f"{name} ({arch}) fits no model kind modelxray analyzes: causal language models (...ForCausalLM), "
        "image classifiers (...ForImageClassification) and CLIP-style dual encoders (CLIPModel, SiglipModel); "
        "set model.kind if the config is mislabelled, or analyze it as any module on example inputs: "
        "model=file model.path=DIR model.kind=generic model.inputs='{input_ids: [1, 16]}'",
    )
