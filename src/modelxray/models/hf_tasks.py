"""Hugging Face encoders, seq2seq and speech models: each kind through its own ``AutoModelFor...``
class, with the tokenizer (and a speech model's feature extractor) from the same directory. What
loads is the Auto classes' call (a processor saved by transformers 5 in one ``processor_config.json``
loads like one saved in ``preprocessor_config.json``); a directory that lacks a part is a one-line
error naming the file to add, before any data is built."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from modelxray.core.errors import ConfigError
from modelxray.core.subject import LoadedModel, ModelInfo
from modelxray.models.cache_only import model_kwargs

PROCESSOR_FILE = "preprocessor_config.json"
# where save_pretrained puts a processor's settings: its own file (a feature extractor or image
# processor alone, transformers 4's processors) or one processor_config.json (transformers 5's processors)
PROCESSOR_FILES = (PROCESSOR_FILE, "processor_config.json")
# a tokenizer's files, only to word the error when AutoTokenizer finds none
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "spiece.model",
    "spm.model",
    "source.spm",
    "tokenizer.model",
    "sentencepiece.bpe.model",
)
NAME_KEY = "model.name_or_path"
TOKENIZER_HINT = "tokenizer.json (or vocab.txt / spiece.model / vocab.json) with tokenizer_config.json"


def load_task_model(source: Any, kind: Any, path: str, kwargs: dict) -> LoadedModel:
    """The model of ``kind`` at ``path`` (by its ``auto_class``), its tokenizer and the processor it
    needs (a speech model's feature extractor, a vision-language model's processor)."""
    import transformers

    auto = getattr(transformers, kind.auto_class)
    tokenizer = load_task_tokenizer(source, path, kwargs) if kind.needs_tokenizer else None
    processor = PROCESSOR_PARTS[kind.needs_processor](path, kwargs) if kind.needs_processor else None
    model = auto.from_pretrained(path, dtype=source.torch_dtype(), **model_kwargs(kwargs))
    return LoadedModel(model, tokenizer, ModelInfo(source.name_or_path, "hf", ""), kind=kind, processor=processor)


def load_kind_tokenizer(source: Any, kind: Any, path: str, kwargs: dict) -> Any:
    """A model's tokenizer: the byte tokenizer where it serves the kind and ``model.tokenizer=byte``
    asks for it, else ``model.tokenizer`` or the directory's."""
    if not kind.takes_byte_tokenizer:
        return load_task_tokenizer(source, path, kwargs)
    if source.tokenizer == "byte":
        from modelxray.models.tokenizers import load_tokenizer

        return load_tokenizer("byte")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(os.path.expanduser(source.tokenizer or path), **kwargs)


def load_task_tokenizer(source: Any, path: str, kwargs: dict) -> Any:
    """The tokenizer of ``model.tokenizer`` or the model's directory; none is a one-line error."""
    from transformers import AutoTokenizer

    if source.tokenizer == "byte":  # no mask, separator or padding token: it would be looked up on the hub
        raise ConfigError(
            "model.tokenizer",
            "the byte tokenizer serves causal LMs and dual encoders only; an encoder, seq2seq or speech model needs "
            "its own: leave model.tokenizer unset (the model directory's) or name a tokenizer directory",
        )
    missing = (
        f"holds no tokenizer: add {TOKENIZER_HINT} (tokenizer.save_pretrained(DIR)) "
        "or set model.tokenizer to a tokenizer directory"
    )
    where = os.path.expanduser(source.tokenizer or path)
    tokenizer = load_part(
        AutoTokenizer, where, kwargs, TOKENIZER_FILES, missing, "tokenizer", "model.tokenizer", (TypeError,)
    )
    if not has_vocabulary(tokenizer):  # transformers 5 builds an empty one from a config.json alone
        raise ConfigError("model.tokenizer", f"{where} {missing}")
    return tokenizer


def has_vocabulary(tokenizer: Any) -> bool:
    """Whether a tokenizer holds tokens beyond its special ones: AutoTokenizer on a directory with no
    tokenizer files builds one from the config alone (BERT's five specials, Whisper's one)."""
    return len(tokenizer) > len(set(getattr(tokenizer, "all_special_ids", ())))


def load_multimodal_processor(path: str, kwargs: dict) -> Any:
    """A generative vision-language model's processor (image processor and tokenizer together: it
    expands the image token into the model's image positions); none is a one-line error."""
    from transformers import AutoProcessor

    missing = (
        f"has no processor_config.json or {PROCESSOR_FILE}: a vision-language model needs its "
        "processor (processor.save_pretrained(DIR)) to place the image among the prompt's tokens"
    )
    # ImportError: a part needs a package (torchvision)
    processor = load_part(
        AutoProcessor, path, kwargs, PROCESSOR_FILES, missing, "processor", errors=(TypeError, ImportError)
    )
    if not hasattr(processor, "image_processor"):  # AutoProcessor falls back to a lone tokenizer or image processor
        raise ConfigError(NAME_KEY, f"{path} {missing}")
    return processor


def load_feature_extractor(path: str, kwargs: dict) -> Any:
    """A speech model's feature extractor, as AutoFeatureExtractor finds it (``preprocessor_config.json``,
    or a processor's ``processor_config.json``); none is a one-line error."""
    from transformers import AutoFeatureExtractor

    missing = (
        f"has no {PROCESSOR_FILE}: a speech model needs its feature extractor "
        "(feature_extractor.save_pretrained(DIR) or processor.save_pretrained(DIR)) to turn audio into model inputs"
    )
    return load_part(AutoFeatureExtractor, path, kwargs, PROCESSOR_FILES, missing, "feature extractor")


# what loads the processor a kind needs (``Kind.needs_processor``)
PROCESSOR_PARTS = {"feature extractor": load_feature_extractor, "processor": load_multimodal_processor}


def load_part(auto: Any, path: str, kwargs: dict, files, missing: str, what: str, key=NAME_KEY, errors=()) -> Any:
    """``auto.from_pretrained(path)`` of a model's part (tokenizer, processor): the Auto class decides
    what loads, whatever file holds it. A load that fails with an OSError, a ValueError or one of
    ``errors`` is a one-line ConfigError at ``key``: ``path`` + ``missing`` (what to add) where a local
    directory holds none of ``files``, else transformers' own reason."""
    try:
        return auto.from_pretrained(path, **kwargs)
    except (OSError, ValueError, *errors) as exc:
        if Path(path).is_dir() and not any((Path(path) / f).is_file() for f in files):
            raise ConfigError(key, f"{path} {missing}") from None
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise ConfigError(key, f"cannot load the {what} of {path}: {first}") from None
