"""A user's own model file: safetensors, a ``torch.save``d state dict, TorchScript, or an HF directory.

A state dict or safetensors file holds weights only, so ``architecture`` says what to build: a
path to a ``config.json`` (or a directory holding one) or an inline mapping such as
``{model_type: gpt2, n_layer: 2, n_embd: 64, n_head: 4, vocab_size: 257}``. Without one, the file
opens as weights only (``models/weights_file.py``): ``analyzer=inspect`` reads it tensor by tensor,
and analyzers that must run the model say that ``architecture`` is needed.
Pickled checkpoints load with ``torch.load(weights_only=True)``: a file that would run code is
refused unless ``allow_unsafe_pickle=true``.

This module is the config; reading and building run in ``file_load`` (imported by ``load()``).
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelxray.core.errors import ConfigError
from modelxray.core.schema import REQUIRED
from modelxray.core.subject import LoadedModel
from modelxray.models.base import ModelSource
from modelxray.models.tokenizers import validate_tokenizer_spec

FORMATS = ("auto", "safetensors", "state_dict", "torchscript", "hf_dir")


def detect_format(path: Path) -> str:
    if path.is_dir():
        return "hf_dir"
    if path.suffix == ".safetensors":
        return "safetensors"
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            if any(n.endswith("constants.pkl") or "/code/" in n for n in zf.namelist()):
                return "torchscript"
    return "state_dict"


@dataclass
class FileSource(ModelSource):
    path: str = field(default="", metadata=REQUIRED)  # the model file or directory
    format: str = "auto"
    architecture: Any = None  # config.json path or directory, or an inline mapping (state dicts)
    tokenizer: str = "byte"
    allow_unsafe_pickle: bool = False
    trust_remote_code: bool = False

    def validate(self) -> None:
        super().validate()
        self.require_choice("format", FORMATS)
        if not self.path:
            raise ConfigError("path", "is required: the model file or directory to analyse")
        p = Path(os.path.expanduser(self.path))
        if not p.exists():
            raise ConfigError("path", f"model file {self.path!r} does not exist")
        self.resolved_format()  # raises on an unknown format
        if isinstance(self.architecture, str) and not Path(os.path.expanduser(self.architecture)).exists():
            raise ConfigError("architecture", f"architecture config {self.architecture!r} does not exist")
        validate_tokenizer_spec(self.tokenizer, "tokenizer")

    def resolved_format(self) -> str:
        return detect_format(Path(os.path.expanduser(self.path))) if self.format == "auto" else self.format

    def load(self) -> LoadedModel:
        from modelxray.models.file_load import load_file

        return load_file(self)
