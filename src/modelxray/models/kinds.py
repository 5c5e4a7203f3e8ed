"""Which kind of model a Hugging Face config describes, from its ``architectures`` and ``model_type``.

A kind decides how inputs are built, which datasets fit and what quality means:

- ``causal_lm``: next-token prediction on token windows (task ``causal_lm``);
- ``masked_lm``: BERT-style encoders, scored on a seeded pattern of masked tokens (task ``masked_lm``);
- ``seq2seq_lm``: encoder-decoders (T5, BART, Marian): a target scored given its source, teacher-forced,
  and greedy generations (task ``seq2seq_lm``);
- ``sequence_classification`` / ``token_classification``: text encoders with a label per text or per
  token (tasks of the same names);
- ``speech_seq2seq`` (Whisper) and ``speech_ctc`` (Wav2Vec2, HuBERT): speech to text, scored by word
  error rate (task ``speech_recognition``);
- ``image_classification``: pixels in, class logits out (task ``classification``);
- ``object_detection`` (DETR, YOLOS, RT-DETR ...): boxes and labels, scored by COCO mAP (task
  ``object_detection``); ``semantic_segmentation`` (SegFormer, UperNet, DPT ...): a class per pixel,
  scored by mean IoU (task ``semantic_segmentation``); ``image_features`` (DINOv2, ViTModel,
  ConvNeXt backbones): an embedding per image, scored by k-NN accuracy and embedding drift (task
  ``image_features``);
- ``image_text_to_text`` (LLaVA, Idefics3 / SmolVLM, PaliGemma ...): an image and a prompt in, text
  out; scored on the answer tokens given the image, teacher-forced (task ``image_text_to_text``);
- ``vision_language``: CLIP-style dual encoders (``CLIPModel``, ``SiglipModel``): zero-shot image
  classification by class-name prompts (task ``classification``, ``models/vision_language.py``);
- ``generic``: any other module, on named example inputs the user declares (task ``generic``,
  ``models/generic.py``); chosen by ``model.kind``, never guessed from a config.

transformers' own auto-class tables (``MODEL_FOR_*_MAPPING_NAMES``) decide, so every architecture
they know is classified the way ``AutoModelFor...`` would load it.
"""

from __future__ import annotations

from typing import Any

from modelxray.core.errors import ConfigError

# what model=hf loads (generic: model=file), in the order a config is matched against them
KINDS = (
    "auto",
    "causal_lm",
    "masked_lm",
    "seq2seq_lm",
    "sequence_classification",
    "token_classification",
    "speech_seq2seq",
    "speech_ctc",
    "image_classification",
    "vision_language",
    "object_detection",
    "semantic_segmentation",
    "image_features",
    "image_text_to_text",
)
TASK_OF_KIND = {
    "causal_lm": "causal_lm",
    "masked_lm": "masked_lm",
    "seq2seq_lm": "seq2seq_lm",
    "sequence_classification": "sequence_classification",
    "token_classification": "token_classification",
    "speech_seq2seq": "speech_recognition",
    "speech_ctc": "speech_recognition",
    "image_classification": "classification",
    "vision_language": "classification",
    "object_detection": "object_detection",
    "semantic_segmentation": "semantic_segmentation",
    "image_features": "image_features",
    "image_text_to_text": "image_text_to_text",
}
# the tasks scored on windows of examples built for the kind (data.for_kind): encoders, seq2seq,
# speech and generative vision-language models
TEXT_AND_SPEECH_TASKS = (
    "masked_lm",
    "seq2seq_lm",
    "sequence_classification",
    "token_classification",
    "speech_recognition",
    "image_text_to_text",  # a generative vision-language model, scored on its answers like a seq2seq model
)
# kinds whose inputs are images and whose outputs are not one label per image
VISION_KINDS = ("object_detection", "semantic_segmentation", "image_features")
VISION_TASKS = VISION_KINDS  # each such kind is its own task
# kinds whose inputs are text: they are scored on data built from a text dataset
TEXT_KINDS = ("masked_lm", "seq2seq_lm", "sequence_classification", "token_classification", "image_text_to_text")
SPEECH_KINDS = ("speech_seq2seq", "speech_ctc")

# what each kind's examples are made from (a dataset's ``modality``): a speech model also hears a
# text dataset spoken by espeak-ng; a generative vision-language model is asked about images
DATA_OF_KIND = {
    **dict.fromkeys(("causal_lm", "masked_lm", "seq2seq_lm", "sequence_classification"), ("text",)),
    "token_classification": ("text",),
    **dict.fromkeys(SPEECH_KINDS, ("text", "audio")),
    **dict.fromkeys(("image_classification", "vision_language", *VISION_KINDS, "image_text_to_text"), ("images",)),
}
# each kind's transformers table, in matching order: a config's architecture is looked up in these
_TABLES = (
    ("image_text_to_text", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES"),  # before causal LMs: some are both
    ("causal_lm", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    ("seq2seq_lm", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    ("speech_seq2seq", "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES"),
    ("speech_ctc", "MODEL_FOR_CTC_MAPPING_NAMES"),
    ("masked_lm", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    ("sequence_classification", "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"),
    ("token_classification", "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES"),
    ("image_classification", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
    ("vision_language", "MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
    ("object_detection", "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES"),
    ("semantic_segmentation", "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES"),
    ("semantic_segmentation", "MODEL_FOR_UNIVERSAL_SEGMENTATION_MAPPING_NAMES"),  # their semantic maps
    ("image_features", "MODEL_FOR_IMAGE_MAPPING_NAMES"),  # bare vision backbones, last: a fallback
)
# universal segmenters scored by their semantic maps: mask queries from pixels alone (OneFormer also
# reads a task prompt, DETR's panoptic head and VidEoMT other inputs)
UNIVERSAL_SEGMENTERS = ("mask2former", "maskformer", "eomt", "eomt_dinov3")


def _class_names(table: dict) -> set[str]:
    """The class names of a mapping table (a value may be a tuple of names)."""
    out: set[str] = set()
    for v in table.values():
        out.update(v if isinstance(v, (tuple, list)) else (v,))
    return out


def kind_tables() -> list[tuple[str, dict]]:
    """(kind, transformers' model_type -> class name table), in matching order."""
    from transformers.models.auto import modeling_auto as auto

    out = []
    for kind, table in _TABLES:
        names = getattr(auto, table, {})
        if table == "MODEL_FOR_UNIVERSAL_SEGMENTATION_MAPPING_NAMES":
            names = {k: v for k, v in names.items() if k in UNIVERSAL_SEGMENTERS}
        out.append((kind, names))
    return out


def kind_of_architecture(arch: str) -> str | None:
    """The kind of a model class by name (``BertForMaskedLM`` -> ``masked_lm``), or None."""
    for kind, table in kind_tables():
        if arch in _class_names(table):
            return kind
    return None


def kind_of_config(config: Any, name: str) -> str:
    """The kind of the model ``config`` describes, or a one-line ConfigError naming its architecture.

    An architecture listed in the config (``BertForMaskedLM``) is found in the table whose classes
    include it; a config without architectures falls back to its ``model_type``, in the order of
    ``_TABLES`` (a model type with a causal-LM head is a causal LM)."""
    model_type = getattr(config, "model_type", "")
    archs = list(getattr(config, "architectures", None) or [])
    tables = kind_tables()
    for arch in archs:
        for kind, table in tables:
            if arch in _class_names(table):
                return kind
    if any(a.endswith(("CLIPModel", "SiglipModel")) for a in archs):
        return "vision_language"
    if not archs:
        for kind, table in tables:
            if model_type in table:
                return kind
    arch = ", ".join(archs) or model_type or "unknown"
    raise ConfigError(
        "model",
        f"{name} ({arch}) fits no model kind modelxray analyzes (causal and masked LMs, seq2seq models, text "
        "classifiers, speech recognisers, image classifiers, CLIP-style dual encoders, object detectors, "
        "semantic segmenters, vision backbones, generative vision-language models); set model.kind if the "
        "config is mislabelled, or analyze it as any module on example inputs: "
        "model=file model.path=DIR model.kind=generic model.inputs='{input_ids: [1, 16]}'",
    )


def refuse_ctc(subject: Any, key: str) -> None:
    """A CTC speech model has no per-position targets to score variants on: one line, before any work."""
    if getattr(subject, "kind", None) == "speech_ctc":
        raise ConfigError(
            key,
            f"{subject.info.name} is a CTC speech model, scored by its transcripts (word error rate), which "
            "analyzer=performance measures with and without quant=...; this analyzer scores token predictions",
        )
