"""A user's own model file: safetensors, a ``torch.save``d state dict, TorchScript, or an HF directory.

A state dict or safetensors file holds weights only, so ``architecture`` says what to build: a
path to a ``config.json`` (or a directory holding one) or an inline mapping such as
``{model_type: gpt2, n_layer: 2, n_embd: 64, n_head: 4, vocab_size: 257}``. Without one, the file
opens as weights only (``models/weights_file.py``): ``analyzer=inspect`` reads it tensor by tensor,
and analyzers that must run the model say that ``architecture`` is needed.
Pickled checkpoints load with ``torch.load(weights_only=True)``: a file that would run code is
refused unless ``allow_unsafe_pickle=true``.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from modelxray.core.errors import ConfigError
from modelxray.core.subject import LoadedModel, ModelInfo
from modelxray.models.base import ModelSource
from modelxray.models.readers import read_state_dict
from modelxray.models.tokenizers import load_tokenizer, validate_tokenizer_spec

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
    path: str = ""
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
        path = Path(os.path.expanduser(self.path))
        fmt = self.resolved_format()
        if fmt == "hf_dir":
            from modelxray.models.hf import HFSource

            has_own = (path / "tokenizer_config.json").exists() or (path / "tokenizer.json").exists()
            return HFSource(
                name_or_path=str(path),
                dtype=self.dtype,
                device=self.device,
                local_files_only=True,
                trust_remote_code=self.trust_remote_code,
                tokenizer=None if self.tokenizer == "byte" and has_own else self.tokenizer,
            ).load()
        if fmt in ("safetensors", "state_dict") and self.architecture is None:
            return self._weights_only(path, fmt)
        tokenizer = load_tokenizer(self.tokenizer, "model.tokenizer")
        if fmt == "torchscript":
            model = _load_torchscript(path)
            stored = _dominant_dtype(model.state_dict())
        else:
            state = read_state_dict(path, fmt, self.allow_unsafe_pickle)
            stored = _dominant_dtype(state)
            model = self._build_architecture()
            _load_into(model, state, path)
        info = ModelInfo(
            name=path.name, source_format=fmt, source_dtype=stored, file_path=str(path), file_bytes=path.stat().st_size
        )
        return LoadedModel(self.place(model), tokenizer, info)

    def _weights_only(self, path: Path, fmt: str) -> LoadedModel:
        """No architecture: the file's tensors, read lazily, for analyzers that need no forward pass."""
        from modelxray.models.weights_file import WeightsFile

        weights = WeightsFile(path, fmt)
        names = weights.tensor_names()  # opens the file now, so a corrupt one fails here, clearly
        info = ModelInfo(
            name=path.name,
            source_format=fmt,
            source_dtype="see inspect",
            file_path=str(path),
            file_bytes=path.stat().st_size,
            notes=[
                f"weights only ({len(names)} tensors, no model.architecture): inspected "
                "without running; set model.architecture to run it"
            ],
        )
        return LoadedModel(weights, None, info, task="weights")

    def _build_architecture(self) -> torch.nn.Module:
        from transformers import AutoConfig, AutoModelForCausalLM

        arch = self.architecture
        try:
            if isinstance(arch, dict):
                arch = dict(arch)
                config = AutoConfig.for_model(arch.pop("model_type"), **arch)
            else:
                config = AutoConfig.from_pretrained(os.path.expanduser(arch), trust_remote_code=self.trust_remote_code)
        except (KeyError, ValueError, OSError) as exc:
            raise ConfigError(
                "model.architecture", f"cannot build an architecture from {self.architecture!r}: {exc}"
            ) from None
        return AutoModelForCausalLM.from_config(config, trust_remote_code=self.trust_remote_code)


def _dominant_dtype(state: dict[str, torch.Tensor]) -> str:
    counts: dict[str, int] = {}
    for t in state.values():
        if isinstance(t, torch.Tensor):
            key = str(t.dtype).replace("torch.", "")
            counts[key] = counts.get(key, 0) + t.numel()
    return max(counts, key=counts.get) if counts else "unknown"


def _load_into(model: torch.nn.Module, state: dict[str, torch.Tensor], path: Path) -> None:
    result = model.load_state_dict(state, strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or [])
    missing = [k for k in result.missing_keys if k not in tied and not k.endswith("lm_head.weight")]
    if missing or result.unexpected_keys:
        bad = (missing or result.unexpected_keys)[:3]
        raise ConfigError(
            str(path),
            f"does not match model.architecture: missing {missing[:3]}, unexpected "
            f"{result.unexpected_keys[:3]} (e.g. {bad})",
        )
    if hasattr(model, "tie_weights"):
        model.tie_weights()


def _load_torchscript(path: Path) -> torch.nn.Module:
    try:
        return torch.jit.load(str(path), map_location="cpu")
    except (RuntimeError, OSError, ValueError) as exc:
        raise ConfigError(
            str(path), f"not a readable TorchScript file (truncated or corrupt?): {str(exc).splitlines()[0]}"
        ) from None
