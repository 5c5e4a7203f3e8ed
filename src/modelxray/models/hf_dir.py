"""What a Hugging Face model directory says of itself, read from its files without loading the
model: its weight files' size, whether its ``config.json`` names an architecture, its kind and its
learned positions. Shared by ``model=hf``, ``model=file`` and the streamed loader."""

from __future__ import annotations

import json
from pathlib import Path

from modelxray.core.errors import ConfigError
from modelxray.kinds.table import chosen_or_found
from modelxray.models.base import Declared


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.glob("*") if p.suffix in (".safetensors", ".bin", ".pt"))


def check_config_json(config: Path, key: str) -> None:
    """A model directory's ``config.json`` is JSON and names its ``model_type``: without one,
    transformers cannot tell which architecture to build. Read as JSON only (milliseconds)."""
    fields = read_json(config, key, "save the model again")
    if not isinstance(fields, dict) or not fields.get("model_type"):
        raise ConfigError(
            key,
            f"{str(config)!r} has no model_type, so transformers cannot tell which architecture to build; add one "
            '(e.g. "model_type": "llama") or save the model again with save_pretrained',
        )


# the JSON files a model directory may hold beside config.json (tokenizer, processor, generation)
SIDE_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "preprocessor_config.json",
    "processor_config.json",
    "generation_config.json",
)


def check_side_files(path: Path, key: str) -> None:
    """Each JSON file beside the weights that is present parses (milliseconds): a tokenizer.json cut
    short is one line naming it now, not a traceback once the weights are loaded."""
    for name in SIDE_FILES:
        if (path / name).is_file():
            read_json(path / name, key, "save the tokenizer or processor again")


def read_json(file: Path, key: str, fix: str):
    """``file`` as JSON, or one line at ``key`` naming it, what is wrong and ``fix``."""
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(key, f"{str(file)!r} cannot be read as JSON ({exc}); {fix}") from None


def declared_from_dir(path: Path, kind: str, name: str) -> Declared:
    """The kind (``kind``, or from the config's architectures as a load would find it) and the
    learned positions of the model saved in ``path``, from its ``config.json`` alone. Rotary or
    relative positions set no hard limit, so only absolute ones count."""
    from types import SimpleNamespace

    config = path / "config.json"
    fields = json.loads(config.read_text(encoding="utf-8"))
    found = chosen_or_found(kind, SimpleNamespace(**{k: fields.get(k) for k in ("model_type", "architectures")}), name)
    return Declared(found, learned_positions(fields), str(config), vocab_of(fields))


def vocab_of(fields: dict) -> int | None:
    """``vocab_size`` of a config's fields (or of its text config's)."""
    text = fields.get("text_config") if isinstance(fields.get("text_config"), dict) else fields
    size = text.get("vocab_size") or fields.get("vocab_size")
    return int(size) if isinstance(size, int) and size > 0 else None


def learned_positions(fields: dict) -> int | None:
    """How many positions a config's learned (absolute) position table holds, or None."""
    text = fields.get("text_config") if isinstance(fields.get("text_config"), dict) else fields
    rotary = any(k in text for k in ("rope_theta", "rope_scaling", "rope_parameters", "rotary_dim"))
    relative = str(text.get("position_embedding_type", "absolute")) != "absolute"
    if rotary or relative:
        return None
    for key in ("n_positions", "max_position_embeddings", "n_ctx"):
        if isinstance(text.get(key), int) and text[key] > 0:
            return int(text[key])
    return None
