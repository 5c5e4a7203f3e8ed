"""The thing under analysis: a model, its tokenizer, its data and where it came from (pure types)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn


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
    task: str = "causal_lm"  # what it is scored as: its kind's task (modelxray.kinds), logged as a tag
    image_shape: tuple[int, int, int] | None = None  # (C, H, W) an image model expects; images are fit to it
    example_inputs: Any = None  # a generic model's named example inputs (data.example_inputs.ExampleInputs)
    kind: Any = None  # its kind (modelxray.kinds), or a kind's name; None: the kind its task stands for
    processor: Any = None  # a speech model's feature extractor, a detector's or VLM's processor
    # what loading cost (models.process_cache): seconds, process memory before/peak/after, CUDA peak
    load_memory: dict[str, float] | None = None
    stream: Any = (
        None  # runtime.offload=blocks: the model's weights on disk, read a block at a time (models.block_stream)
    )


@dataclass
class Subject:
    model: nn.Module
    tokenizer: Any
    # what the analyzers score, built by the data layer above: TokenData, ClassificationData, a task's
    # windows or images, a generic model's ExampleInputs; None when the user's batches stand for it
    data: Any
    info: ModelInfo
    task: str = "causal_lm"  # what it is scored as: its kind's task (modelxray.kinds), logged as a tag
    batches: Any = None  # a user's token batches (Python API, read once); used instead of windows over ``data``
    applied: list[dict[str, Any]] = field(default_factory=list)  # transformations (quantization...) so far
    # the model's outputs before the run transformed it (quantization), to score agreement against:
    # a classifier's test-split logits, a generic model's outputs on its example inputs
    reference: Any = None
    kind: Any = None  # its kind (modelxray.kinds.table.kind_of reads it; None: the kind its task stands for)
    processor: Any = None  # a speech model's feature extractor, a detector's or VLM's processor
    # reference=file|hf: the reference's weights, read one tensor at a time (models.weights_file)
    reference_weights: Any = None
    # reference=file|hf|gguf on a language model: the reference's outputs on an analyzer's own windows
    # (analyzer name -> measure.reference.Reference), its baseline instead of the model as loaded
    reference_baselines: dict[str, Any] = field(default_factory=dict)
    load_memory: dict[str, float] | None = None  # what loading the model cost (LoadedModel.load_memory)
    stream: Any = None  # runtime.offload=blocks: ``model`` is on the meta device, its blocks read from disk

    def with_model(self, model: nn.Module, step: dict[str, Any]) -> Subject:
        """A copy of this subject holding a transformed model, recording the step that made it."""
        return replace(self, model=model, applied=[*self.applied, step])
