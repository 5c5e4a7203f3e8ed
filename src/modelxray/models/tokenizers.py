"""Tokenizer loading for the model sources (the token cache's tokenizer identity lives with the cache,
in ``modelxray.data.base``)."""

from __future__ import annotations

import os
from typing import Any

from modelxray.core.errors import ConfigError
from modelxray.models.byte_tokenizer import ByteTokenizer


def load_tokenizer(spec: str, key: str = "tokenizer", trust_remote_code: bool = False) -> Any:
    """``byte`` for the built-in byte tokenizer, else a Hugging Face tokenizer id or directory."""
    if spec == "byte":
        return ByteTokenizer()
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(spec, trust_remote_code=trust_remote_code)
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(
            key,
            f"cannot load tokenizer {spec!r} ({type(exc).__name__}: {str(exc).splitlines()[0]}); "
            "use 'byte' or a local tokenizer directory",
        ) from None


def validate_tokenizer_spec(spec: str, key: str) -> None:
    if spec != "byte" and (spec.startswith((".", "/", "~")) and not os.path.exists(os.path.expanduser(spec))):
        raise ConfigError(key, f"tokenizer directory {spec!r} does not exist; use 'byte' or an existing directory")
