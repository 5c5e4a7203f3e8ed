"""Any Hugging Face causal LM or image classifier: a hub id (needs the network or a filled cache) or a
local directory. The kind comes from the directory's config (``models/kinds.py``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from modelxray.core.errors import ConfigError
from modelxray.core.schema import REQUIRED
from modelxray.core.subject import LoadedModel, ModelInfo
from modelxray.models.base import ModelSource
from modelxray.models.kinds import KINDS, TASK_OF_KIND, kind_of_config
from modelxray.models.tokenizers import load_tokenizer


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.glob("*") if p.suffix in (".safetensors", ".bin", ".pt"))


@dataclass
class HFSource(ModelSource):
    name_or_path: str = field(default="", metadata=REQUIRED)  # a hub id (org/name) or a local model directory
    revision: str | None = None
    trust_remote_code: bool = False  # off unless the user opts in: remote code runs on this machine
    local_files_only: bool = False
    tokenizer: str | None = None  # defaults to name_or_path (language models)
    kind: str = "auto"  # auto (from the config's architectures) | causal_lm | image_classification
    image_size: int | None = None  # image models: input size when neither config nor image processor names it

    def validate(self) -> None:
        super().validate()
        self.require_choice("kind", KINDS)
        self.require_positive("image_size", allow_none=True)
        if not self.name_or_path:
            raise ConfigError("name_or_path", "is required: a hub id (org/name) or a local model directory")
        looks_local = self.name_or_path.startswith((".", "/", "~"))
        if looks_local and not Path(os.path.expanduser(self.name_or_path)).is_dir():
            raise ConfigError("name_or_path", f"model directory {self.name_or_path!r} does not exist")

    def load(self) -> LoadedModel:
        from transformers import AutoConfig

        path = os.path.expanduser(self.name_or_path)
        kwargs = dict(
            revision=self.revision, trust_remote_code=self.trust_remote_code, local_files_only=self.local_files_only
        )
        try:
            config = AutoConfig.from_pretrained(path, **kwargs)
            kind = kind_of_config(config, self.name_or_path) if self.kind == "auto" else self.kind
            if kind == "image_classification":
                loaded = self._load_image_classifier(path, kwargs)
            else:
                loaded = self._load_causal_lm(path, kwargs)
        except OSError as exc:
            first = str(exc).strip().splitlines()[0]
            raise ConfigError(
                "model.name_or_path", f"cannot load {self.name_or_path!r}: {first} (offline? pass a local directory)"
            ) from None
        stored = str(getattr(config, "dtype", None) or "unknown").replace("torch.", "")
        local = Path(path)
        loaded.info = ModelInfo(
            name=self.name_or_path,
            source_format="hf",
            source_dtype=stored,
            file_path=str(local) if local.is_dir() else None,
            file_bytes=_dir_bytes(local) if local.is_dir() else None,
            notes=loaded.info.notes,
        )
        loaded.task = TASK_OF_KIND[kind]
        loaded.model = self.place(loaded.model)
        return loaded

    def _load_causal_lm(self, path: str, kwargs: dict) -> LoadedModel:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(path, dtype=self.torch_dtype(), **kwargs)
        if self.tokenizer == "byte":
            tokenizer = load_tokenizer("byte")
        else:
            tokenizer = AutoTokenizer.from_pretrained(os.path.expanduser(self.tokenizer or path), **kwargs)
        return LoadedModel(model, tokenizer, ModelInfo(self.name_or_path, "hf", ""))

    def _load_image_classifier(self, path: str, kwargs: dict) -> LoadedModel:
        from transformers import AutoModelForImageClassification

        from modelxray.models.hf_vision import wrap_image_classifier

        net = AutoModelForImageClassification.from_pretrained(path, dtype=self.torch_dtype(), **kwargs)
        model, notes = wrap_image_classifier(net, path, self.image_size, self.name_or_path)
        info = ModelInfo(self.name_or_path, "hf", "", notes=notes)
        return LoadedModel(model, None, info, task="classification", image_shape=model.image_shape)
