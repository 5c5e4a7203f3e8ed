"""Tokenizer loading and a stable identity for the token cache."""

from __future__ import annotations

import hashlib
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


def tokenizer_identity(tokenizer: Any) -> str:
    """A hash that changes whenever the tokenizer would split text differently."""
    if hasattr(tokenizer, "identity"):
        return tokenizer.identity()
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return hashlib.sha256(backend.to_str().encode()).hexdigest()[:16]
    name = getattr(tokenizer, "name_or_path", type(tokenizer).__name__)
    return hashlib.sha256(f"{name}:{len(tokenizer)}".encode()).hexdigest()[:16]


def validate_tokenizer_spec(spec: str, key: str) -> None:
    if spec != "byte" and (spec.startswith((".", "/", "~")) and not os.path.exists(os.path.expanduser(spec))):
        raise ConfigError(key, f"tokenizer directory {spec!r} does not exist; use 'byte' or an existing directory")
