"""What every model source produces, and the knobs they share."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from modelxray.configurable import Configurable
from modelxray.errors import ConfigError

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}


@dataclass
class ModelInfo:
    """Provenance of a loaded model, logged as ``model/*`` params and shown in every report."""

    name: str
    source_format: str  # gguf, hf, safetensors, state_dict, torchscript, config (built in code)
    source_dtype: str  # precision as stored at the source, e.g. "Q4_1 (linear), Q8_0 (embeddings)"
    file_path: str | None = None
    file_bytes: int | None = None
    dequantized_from_bits: int | None = None  # set when the fp weights came from a quantized file
    notes: list[str] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)  # training checkpoints, by step (model.checkpoints)

    def as_params(self) -> dict[str, str]:
        out = {
            "model/source_format": self.source_format,
            "model/source_dtype": self.source_dtype,
            "model/name": self.name,
        }
        if self.dequantized_from_bits:
            out["model/dequantized_from_bits"] = str(self.dequantized_from_bits)
        return out


@dataclass
class LoadedModel:
    model: nn.Module
    tokenizer: Any
    info: ModelInfo
    task: str = "causal_lm"  # causal_lm | classification: which analyzers and datasets apply


@dataclass
class ModelSource(Configurable):
    """Base of model configs: ``load()`` does the heavy work, construction only validates."""

    dtype: str = "float32"
    device: str = "auto"

    def validate(self) -> None:
        self.require_choice("dtype", DTYPES)
        if self.device not in ("auto", "cpu") and not self.device.startswith("cuda") and self.device != "mps":
            raise ConfigError("device", f"must be auto, cpu, cuda or cuda:N; got {self.device!r}")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(
                "device", f"{self.device!r} asked for but CUDA is not available here; use model.device=cpu"
            )

    def load(self) -> LoadedModel:  # pragma: no cover - abstract
        raise NotImplementedError

    def cache_key(self) -> str:
        """Identity of the loaded model, for the per-process cache."""
        return type(self).__qualname__ + json.dumps(dataclasses.asdict(self), sort_keys=True, default=str)

    def torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

    def place(self, model: nn.Module) -> nn.Module:
        """Move to the configured dtype and device and switch to eval mode."""
        return model.to(device=self.torch_device(), dtype=DTYPES[self.dtype]).eval()
