"""Any Hugging Face causal LM: a hub id (needs the network or a filled cache) or a local directory."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from modelxray.core.errors import ConfigError
from modelxray.core.schema import REQUIRED
from modelxray.core.subject import LoadedModel, ModelInfo
from modelxray.models.base import ModelSource
from modelxray.models.tokenizers import load_tokenizer


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.glob("*") if p.suffix in (".safetensors", ".bin", ".pt"))


@dataclass
class HFSource(ModelSource):
    name_or_path: str = field(default="", metadata=REQUIRED)  # a hub id (org/name) or a local model directory
    revision: str | None = None
    trust_remote_code: bool = False  # off unless the user opts in: remote code runs on this machine
    local_files_only: bool = False
    tokenizer: str | None = None  # defaults to name_or_path

    def validate(self) -> None:
        super().validate()
        if not self.name_or_path:
            raise ConfigError("name_or_path", "is required: a hub id (org/name) or a local model directory")
        looks_local = self.name_or_path.startswith((".", "/", "~"))
        if looks_local and not Path(os.path.expanduser(self.name_or_path)).is_dir():
            raise ConfigError("name_or_path", f"model directory {self.name_or_path!r} does not exist")

    def load(self) -> LoadedModel:
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        path = os.path.expanduser(self.name_or_path)
        kwargs = dict(
            revision=self.revision, trust_remote_code=self.trust_remote_code, local_files_only=self.local_files_only
        )
        try:
            config = AutoConfig.from_pretrained(path, **kwargs)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=self.torch_dtype(), **kwargs)
            if self.tokenizer == "byte":
                tokenizer = load_tokenizer("byte")
            else:
                tokenizer = AutoTokenizer.from_pretrained(os.path.expanduser(self.tokenizer or path), **kwargs)
        except OSError as exc:
            first = str(exc).strip().splitlines()[0]
            raise ConfigError(
                "model.name_or_path", f"cannot load {self.name_or_path!r}: {first} (offline? pass a local directory)"
            ) from None
        stored = str(getattr(config, "torch_dtype", None) or getattr(config, "dtype", None) or "unknown").replace(
            "torch.", ""
        )
        local = Path(path)
        info = ModelInfo(
            name=self.name_or_path,
            source_format="hf",
            source_dtype=stored,
            file_path=str(local) if local.is_dir() else None,
            file_bytes=_dir_bytes(local) if local.is_dir() else None,
        )
        return LoadedModel(self.place(model), tokenizer, info)
