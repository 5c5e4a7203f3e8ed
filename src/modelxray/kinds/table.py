"""Every model kind, in the order a Hugging Face config is matched against them, and how a model's
kind is found: from its config's ``architectures`` (or ``model_type``), its class, or its name.

transformers' own auto-class tables (``MODEL_FOR_*_MAPPING_NAMES``) decide, so every architecture
they know is classified the way ``AutoModelFor...`` would load it. A new kind is one module in this
package and one line in ``KINDS``."""

from __future__ import annotations

from typing import Any

from modelxray.core.errors import ConfigError
from modelxray.kinds.audio_classification import AudioClassifier
from modelxray.kinds.base import Kind
from modelxray.kinds.causal_lm import CausalLM
from modelxray.kinds.classifier import Classifier
from modelxray.kinds.generic import Generic
from modelxray.kinds.image_classification import ImageClassifier
from modelxray.kinds.image_features import ImageFeatures
from modelxray.kinds.image_text_to_text import ImageTextToText
from modelxray.kinds.masked_lm import MaskedLM
from modelxray.kinds.object_detection import ObjectDetector
from modelxray.kinds.semantic_segmentation import SemanticSegmenter
from modelxray.kinds.seq2seq_lm import Seq2SeqLM
from modelxray.kinds.sequence_classification import TextClassifier
from modelxray.kinds.speech_ctc import SpeechCTC
from modelxray.kinds.speech_seq2seq import SpeechSeq2Seq
from modelxray.kinds.token_classification import TokenClassifier
from modelxray.kinds.vision_language import DualEncoder
from modelxray.kinds.weights import WeightsOnly

# in matching order: a config's architecture is looked up in each kind's tables in turn
KINDS: tuple[Kind, ...] = (
    ImageTextToText(),  # before causal LMs: some classes are both
    CausalLM(),
    Seq2SeqLM(),
    SpeechSeq2Seq(),
    SpeechCTC(),
    AudioClassifier(),
    MaskedLM(),
    TextClassifier(),
    TokenClassifier(),
    ImageClassifier(),
    DualEncoder(),
    ObjectDetector(),
    SemanticSegmenter(),
    ImageFeatures(),  # bare vision backbones, last: a fallback
    Classifier(),  # the kinds below are never found in a config
    Generic(),
    WeightsOnly(),
)
BY_NAME = {k.name: k for k in KINDS}
# what model=hf can load by its own Auto class (model.kind), with auto: found from the config
HF_KINDS = ("auto", *(k.name for k in KINDS if k.hf_tables))
# what model=file can build (model.kind), with auto: found from the file
FILE_KINDS = ("auto", *(k.name for k in KINDS if k.from_file))


def named(name: str) -> Kind:
    """The kind called ``name``."""
    return BY_NAME[name]


def saved_kind(data: dict) -> Kind | None:
    """The kind of the model a saved result measured: its ``kind``, or for a result saved before kinds
    were recorded, the first kind scored as its ``task`` (of the same family); None when neither says."""
    if data.get("kind") in BY_NAME:
        return BY_NAME[data["kind"]]
    return next((k for k in KINDS if k.task == data.get("task")), None)


def kind_of(subject: Any) -> Kind:
    """The kind of a loaded model or subject: its ``kind`` (a Kind, or a kind's name), else the kind its
    ``task`` stands for (a language model, a classifier, a generic module, weights alone)."""
    kind = getattr(subject, "kind", None)
    if isinstance(kind, Kind):
        return kind
    if kind:
        return BY_NAME[kind]
    task = getattr(subject, "task", "causal_lm")  # causal_lm, classification, generic, weights: the kind's name
    if task not in BY_NAME:
        raise ConfigError("model", f"a model loaded for task {task!r} names no kind; give its kind (kind=...)")
    return BY_NAME[task]


AUTO = "auto"  # model.kind's value for "the kind the config describes"


def chosen(option: str) -> Kind | None:
    """The kind ``model.kind`` names, or None for ``auto`` (found from the model's config on load)."""
    return None if option == AUTO else named(option)


def chosen_or_found(option: str, config: Any, name: str) -> Kind:
    """``model.kind`` as chosen, or (``auto``) the kind ``config`` describes."""
    return chosen(option) or kind_of_config(config, name)


def kind_tables() -> list[tuple[Kind, dict]]:
    """(kind, transformers' model_type -> class name table), in matching order."""
    from transformers.models.auto import modeling_auto as auto

    out = []
    for kind in KINDS:
        for table in kind.hf_tables:
            names = getattr(auto, table, {})
            only = getattr(kind, "universal_segmenters", None) if "UNIVERSAL" in table else None
            if only is not None:
                names = {k: v for k, v in names.items() if k in only}
            out.append((kind, names))
    return out


def _class_names(table: dict) -> set[str]:
    """The class names of a mapping table (a value may be a tuple of names)."""
    out: set[str] = set()
    for v in table.values():
        out.update(v if isinstance(v, (tuple, list)) else (v,))
    return out


def kind_of_architecture(arch: str) -> Kind | None:
    """The kind of a model class by name (``BertForMaskedLM`` -> masked_lm), or None."""
    for kind, table in kind_tables():
        if arch in _class_names(table):
            return kind
    return None


def kind_of_config(config: Any, name: str) -> Kind:
    """The kind of the model ``config`` describes, or a one-line ConfigError naming its architecture.

    An architecture listed in the config (``BertForMaskedLM``) is found in the table whose classes
    include it; a config without architectures falls back to its ``model_type``, in the order of
    ``KINDS`` (a model type with a causal-LM head is a causal LM)."""
    model_type = getattr(config, "model_type", "")
    archs = list(getattr(config, "architectures", None) or [])
    tables = kind_tables()
    for arch in archs:
        for kind, table in tables:
            if arch in _class_names(table):
                return kind
    for kind in KINDS:
        if any(a.endswith(getattr(kind, "architecture_suffixes", ())) for a in archs):
            return kind
    if not archs:
        for kind, table in tables:
            if model_type in table:
                return kind
    arch = ", ".join(archs) or model_type or "unknown"
    nouns = ", ".join(dict.fromkeys(f"{k.noun}s" for k in KINDS if k.hf_tables))
    raise ConfigError(
        "model",
        f"{name} ({arch}) fits no model kind modelxray analyzes ({nouns}); set model.kind if the config is "
        "mislabelled, or analyze it as any module on example inputs: "
        "model=file model.path=DIR model.kind=generic model.inputs='{input_ids: [1, 16]}'",
    )


def overview_table() -> str:
    """docs/model_kinds.md's overview: a row per kind (a speech recogniser's two kinds share one)."""
    rows = ["| kind | models | datasets | quality |", "|---|---|---|---|"]
    seen: set[tuple[str, str]] = set()
    for kind in KINDS:
        if (kind.noun, kind.models) in seen:
            continue
        seen.add((kind.noun, kind.models))
        names = " / ".join(f"`{k.name}`" for k in KINDS if (k.noun, k.models) == (kind.noun, kind.models))
        rows.append(f"| {kind.noun} ({names}) | {kind.models} | {kind.datasets} | {kind.quality} |")
    return "\n".join(rows)
