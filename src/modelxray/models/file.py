"""A user's own model file: safetensors, a ``torch.save``d state dict, TorchScript, or an HF directory.

A state dict or safetensors file holds weights only, so ``architecture`` says what to build: a
path to a ``config.json`` (or a directory holding one), an inline mapping such as
``{model_type: gpt2, n_layer: 2, n_embd: 64, n_head: 4, vocab_size: 257}``, or any ``nn.Module``
by ``_target_`` (``{_target_: mypkg.nets.CNN, channels: 16}``, built as Hydra instantiates it). Without one, the file
opens as weights only (``models/weights_file.py``): ``analyzer=inspect`` reads it tensor by tensor,
and analyzers that must run the model say that ``architecture`` is needed.
What the model is (``kind``): from the config of an HF directory or of ``architecture``; for
TorchScript, ``generic`` when ``inputs`` names its example inputs, ``image_classification`` when
``input_shape`` gives one image's shape, else a causal language model taking token ids. A
``generic`` model is any module run on named example inputs (shapes, or a file of saved tensors):
inspect, performance and quantization apply, and agreement with the unquantized outputs is its
quality.
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

from modelxray.core.configurable import implementation
from modelxray.core.errors import ConfigError, require_library
from modelxray.core.schema import REQUIRED
from modelxray.core.subject import LoadedModel
from modelxray.data.example_inputs import check_inputs_value
from modelxray.kinds.table import FILE_KINDS, KINDS, chosen
from modelxray.models.base import Declared, ModelSource
from modelxray.models.hf_dir import check_config_json, check_side_files, declared_from_dir
from modelxray.models.tokenizers import validate_tokenizer_spec

FORMATS = ("auto", "safetensors", "state_dict", "torchscript", "hf_dir", "gguf")
GGUF_KIND = "causal_lm"  # what a GGUF file holds


def _listed_or(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def detect_format(path: Path) -> str:
    if path.is_dir():
        return "hf_dir"
    if path.suffix == ".safetensors":
        return "safetensors"
    if path.suffix == ".gguf":
        return "gguf"
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            if any(n.endswith("constants.pkl") or "/code/" in n for n in zf.namelist()):
                return "torchscript"
    return "state_dict"


def _check_not_empty(path: Path) -> None:
    """An empty file (an interrupted save or copy) fails here, not as a reader's traceback."""
    if path.is_file() and path.stat().st_size == 0:
        raise ConfigError(
            "path",
            f"model file {str(path)!r} is empty (0 bytes): save or copy the checkpoint again and point model.path at it",
        )


def _check_hf_dir(path: Path) -> None:
    """A directory loads as a Hugging Face model, which needs the ``config.json`` saying what to build."""
    if not path.is_dir():
        raise ConfigError("path", f"{str(path)!r} is a file; model.format=hf_dir wants a Hugging Face model directory")
    if not (path / "config.json").is_file():
        raise ConfigError(
            "path",
            f"directory {str(path)!r} has no config.json, so it is no Hugging Face model directory: point model.path "
            "at a folder saved with save_pretrained (config.json and weights) or at a weights file (.safetensors, .pt)",
        )
    check_config_json(path / "config.json", "path")
    check_side_files(path, "path")


@dataclass
class FileSource(ModelSource):
    path: str = field(default="", metadata=REQUIRED)  # the model file or directory
    format: str = "auto"
    architecture: Any = None  # state dicts: config.json path or directory, {model_type: ...}, or {_target_: ...}
    tokenizer: str = "byte"
    allow_unsafe_pickle: bool = False
    trust_remote_code: bool = False
    kind: str = "auto"  # auto | causal_lm | image_classification | vision_language (HF directory) | generic
    input_shape: list[int] | None = None  # image_classification: one image, (C, H, W), e.g. [1, 28, 28]
    # e.g. {x: [2, 16], ids: {shape: [2, 8], dtype: int64}}, or a .safetensors / torch.save'd dict file
    inputs: Any = None  # generic: named example inputs, batch first: name -> shape, {shape, dtype, high} or a fixed {value: 16000}
    inputs_seed: int = 0  # seed of example inputs drawn from shapes
    engine: str = "pytorch"  # a .gguf file: pytorch (dequantized) | llama_cpp (llama.cpp's kernels; performance only)

    def validate(self) -> None:
        super().validate()
        self.require_choice("format", FORMATS)
        self.require_choice("kind", FILE_KINDS)
        if not self.path:
            raise ConfigError("path", "is required: the model file or directory to analyse")
        p = Path(os.path.expanduser(self.path))
        if not p.exists():
            raise ConfigError("path", f"model file {self.path!r} does not exist")
        _check_not_empty(p)
        if self.resolved_format() == "hf_dir":
            _check_hf_dir(p)
        self.require_choice("engine", ("pytorch", "llama_cpp"))
        if self.engine != "pytorch" and self.resolved_format() != "gguf":
            raise ConfigError(
                "engine", f"{self.engine} evaluates GGUF files; {p.name} is not one: leave engine=pytorch"
            )
        if self.engine == "llama_cpp":
            require_library("engine", "llama_cpp", "llama_cpp", "llama-cpp-python (it builds llama.cpp)", "llama_cpp")
        if isinstance(self.architecture, str) and not Path(os.path.expanduser(self.architecture)).exists():
            raise ConfigError("architecture", f"architecture config {self.architecture!r} does not exist")
        validate_tokenizer_spec(self.tokenizer, "tokenizer")
        self._validate_kind()

    def _validate_kind(self) -> None:
        """The keys each kind needs, and no key another kind owns: one line naming the key."""
        if self.inputs is not None:
            check_inputs_value(self.inputs, "inputs")
        if self.input_shape is not None:
            shape = list(self.input_shape)
            if len(shape) != 3 or not all(isinstance(d, int) and d > 0 for d in shape):
                raise ConfigError(
                    "input_shape", f"must be one image's [channels, height, width], e.g. [1, 28, 28]; got {shape}"
                )
        kind, fmt = self.resolved_kind(), self.resolved_format()
        for owner, key in self._declaring_keys():  # a key that declares another kind than model.kind
            if owner is not kind:
                raise ConfigError(
                    key, f"{owner.file_key_is}; model.kind is {kind or 'auto'}: set kind={owner} or drop {key}"
                )
        if isinstance(self.architecture, dict):  # a _target_ runs what it names: checked before anything loads
            from modelxray.models.architecture_targets import check_targets

            check_targets(self.architecture, "architecture", self.trust_remote_code)
        built = isinstance(self.architecture, dict) and "_target_" in self.architecture
        if built and (kind is None or not kind.from_target):
            raise ConfigError(
                "kind",
                "a module built from _target_ has no config to say what it is: set model.kind="
                + _listed_or(
                    [f"{k}{f' (with model.{k.file_key})' if k.file_key else ''}" for k in KINDS if k.from_target]
                ),
            )
        if kind is not None:
            kind.check_file_keys(self, fmt)

    def _declaring_keys(self) -> list:
        """(kind, key) for each given key that declares a kind (``inputs``: generic; ``input_shape``: an
        image classifier, except for an HF directory, whose config says what it is)."""
        hf_dir = self.resolved_format() == "hf_dir"
        return [
            (k, k.file_key)
            for k in KINDS
            if k.file_key and getattr(self, k.file_key) is not None and not (hf_dir and k.file_key == "input_shape")
        ]

    def resolved_kind(self) -> Any:
        """The kind ``kind`` names, or what ``auto`` means for this file: the key that declares one
        (``inputs``, ``input_shape``); None where the config decides on load (an HF directory, an
        architecture) or TorchScript takes token ids."""
        named = chosen(self.kind)
        if named is not None:
            return named
        declaring = self._declaring_keys()
        return declaring[0][0] if declaring else None

    def declared(self) -> Declared:
        kind = self.resolved_kind()
        if self.resolved_format() == "hf_dir" and (kind is None or kind.hf_tables):
            return declared_from_dir(Path(os.path.expanduser(self.path)), self.kind, self.path)
        if self.resolved_format() == "gguf":  # llama.cpp's format holds causal LMs
            return Declared(GGUF_KIND)
        return Declared(kind)

    def resolved_format(self) -> str:
        return detect_format(Path(os.path.expanduser(self.path))) if self.format == "auto" else self.format

    def load(self) -> LoadedModel:
        return implementation("modelxray.models.file_load").load_file(self)
