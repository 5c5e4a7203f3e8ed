"""Loading a ``FileSource``: read the file safely, build the architecture, fit the weights into it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from modelxray.core.errors import ConfigError
from modelxray.core.subject import LoadedModel, ModelInfo
from modelxray.models.readers import read_state_dict
from modelxray.models.tokenizers import load_tokenizer

if TYPE_CHECKING:
    from modelxray.models.file import FileSource


def load_file(source: FileSource) -> LoadedModel:
    """The model of ``source``: an HF directory, a runnable model, or a weights-only view."""
    path = Path(os.path.expanduser(source.path))
    fmt = source.resolved_format()
    if fmt == "hf_dir":
        from modelxray.models.hf import HFSource

        has_own = (path / "tokenizer_config.json").exists() or (path / "tokenizer.json").exists()
        return HFSource(
            name_or_path=str(path),
            dtype=source.dtype,
            device=source.device,
            local_files_only=True,
            trust_remote_code=source.trust_remote_code,
            tokenizer=None if source.tokenizer == "byte" and has_own else source.tokenizer,
        ).load()
    if fmt in ("safetensors", "state_dict") and source.architecture is None:
        return _weights_only(path, fmt)
    tokenizer = load_tokenizer(source.tokenizer, "model.tokenizer")
    if fmt == "torchscript":
        model = _load_torchscript(path)
        stored = _dominant_dtype(model.state_dict())
    else:
        state = read_state_dict(path, fmt, source.allow_unsafe_pickle)
        stored = _dominant_dtype(state)
        model = _build_architecture(source)
        _load_into(model, state, path)
    info = ModelInfo(
        name=path.name, source_format=fmt, source_dtype=stored, file_path=str(path), file_bytes=path.stat().st_size
    )
    return LoadedModel(source.place(model), tokenizer, info)


def _weights_only(path: Path, fmt: str) -> LoadedModel:
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


def _build_architecture(source: FileSource) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    arch = source.architecture
    try:
        if isinstance(arch, dict):
            arch = dict(arch)
            config = AutoConfig.for_model(arch.pop("model_type"), **arch)
        else:
            config = AutoConfig.from_pretrained(os.path.expanduser(arch), trust_remote_code=source.trust_remote_code)
    except (KeyError, ValueError, OSError) as exc:
        raise ConfigError(
            "model.architecture", f"cannot build an architecture from {source.architecture!r}: {exc}"
        ) from None
    return AutoModelForCausalLM.from_config(config, trust_remote_code=source.trust_remote_code)


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
