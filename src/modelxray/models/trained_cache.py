"""Weights of models trained here (the digits classifiers, the digits CLIP), kept on disk by the
settings that shaped them, so a second run loads instead of training again."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def cache_file(cache_dir: str, stem: str, settings: dict[str, Any], version: int) -> Path:
    """``<cache_dir>/<stem>-<hash of settings and version>.safetensors``."""
    digest = hashlib.sha256(json.dumps([version, settings], sort_keys=True).encode()).hexdigest()[:16]
    return Path(cache_dir).expanduser() / f"{stem}-{digest}.safetensors"


def save_weights(state_dict: dict, path: Path) -> None:
    """Write atomically: parallel jobs never read half a file."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    save_file({k: v.contiguous() for k, v in state_dict.items()}, str(tmp))
    tmp.replace(path)
