"""What every model source produces, and the knobs they share.

Config only: importing a model source imports no torch (the CLI validates configs in well under a
second); torch is imported by the methods that load or place a model.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from modelxray.core.configurable import Configurable
from modelxray.core.errors import ConfigError
from modelxray.core.subject import LoadedModel

if TYPE_CHECKING:
    import torch
    from torch import nn

DTYPES = ("float32", "float16", "bfloat16", "float64")  # torch dtype names (torch.<name>)


@dataclass(frozen=True)
class Declared:
    """What a model's config says of it before any weight is read: its kind and, for a model with
    learned positions, how many tokens one sequence may hold (None where it does not say)."""

    kind: Any  # a kinds.base.Kind (a kind's name is looked up), or None where the config does not say
    max_positions: int | None = None
    where: str = ""  # the file or key that says so, for the error message
    vocab_size: int | None = None  # the token ids its embedding holds, where the config says

    def __post_init__(self) -> None:
        if isinstance(self.kind, str):
            from modelxray.kinds.table import named

            object.__setattr__(self, "kind", named(self.kind))  # frozen: set once, as built


@dataclass
class ModelSource(Configurable):
    """Base of model configs: ``load()`` does the heavy work, construction only validates."""

    dtype: str = "float32"
    device: str = "auto"
    # the kind every model of this source is (None: known only once loaded, or from declared())
    kind_of_source: ClassVar[str | None] = None
    # whether load() builds the model with transformers: the run then imports transformers' model code
    # with its optional libraries deferred (models.optional_imports); a plain torch model skips both
    builds_with_transformers: ClassVar[bool] = True

    def declared(self) -> Declared:
        """The model's kind and positions as its config says, read without loading it."""
        return Declared(self.kind_of_source)

    def validate(self) -> None:
        self.require_choice("dtype", DTYPES)
        if self.device not in ("auto", "cpu") and not self.device.startswith("cuda") and self.device != "mps":
            raise ConfigError("device", f"must be auto, cpu, cuda or cuda:N; got {self.device!r}")
        if self.device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise ConfigError(
                    "device", f"{self.device!r} asked for but CUDA is not available here; use model.device=cpu"
                )

    def load(self) -> LoadedModel:  # pragma: no cover - abstract
        raise NotImplementedError

    def block_weights(self):
        """The weights a streamed run reads a block at a time (``runtime.offload=blocks``: a
        ``models.safetensors_dir.SafetensorsDir``), found without reading any weight; a one-line
        ConfigError where this source cannot be read one block at a time."""
        raise ConfigError(
            "runtime.offload",
            f"blocks reads a Hugging Face causal language model saved as safetensors (model=hf) one block at a "
            f"time; {type(self).__name__} models are read whole: use runtime.offload=none",
        )

    def tokenizer_alone(self) -> Any:
        """The model's tokenizer without its weights (seconds before a load of minutes), so that a text
        too short to score, or ids beyond the model's vocabulary, are one line before any weight is
        read; None where the source cannot give it apart (the load then checks)."""
        return None

    def estimated_bytes(self) -> int | None:
        """The model's parameter and buffer bytes at ``dtype`` from its config alone, before anything is
        built or read; None where the source cannot tell (the run then checks nothing before loading)."""
        return None

    def load_streamed(self, hidden_budget: int | None, reason: str) -> LoadedModel:  # pragma: no cover
        """The model built on the meta device with its weights left on disk (``LoadedModel.stream``)."""
        raise NotImplementedError

    def cache_key(self) -> str:
        """Identity of the loaded model, for the per-process cache."""
        return type(self).__qualname__ + json.dumps(dataclasses.asdict(self), sort_keys=True, default=str)

    def torch_dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, self.dtype)

    def torch_device(self) -> torch.device:
        import torch

        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

    def place(self, model: nn.Module) -> nn.Module:
        """Move to the configured dtype and device and switch to eval mode."""
        return model.to(device=self.torch_device(), dtype=self.torch_dtype()).eval()
