"""Loading a ``FileSource``: read the file safely, build the architecture, fit the weights into it."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from modelxray.core.errors import ConfigError
from modelxray.core.formatting import listed
from modelxray.core.subject import LoadedModel, ModelInfo
from modelxray.kinds.causal_lm import CausalLM
from modelxray.kinds.generic import Generic
from modelxray.kinds.image_classification import ImageClassifier
from modelxray.models.architecture_targets import check_targets
from modelxray.models.readers import read_state_dict
from modelxray.models.tokenizers import load_tokenizer

if TYPE_CHECKING:
    from modelxray.models.file import FileSource


def load_file(source: FileSource) -> LoadedModel:
    """The model of ``source``: an HF directory, a runnable model, or a weights-only view. A weights
    file with a ``config.json`` beside it and no ``architecture`` is built from that config (as
    ``save_pretrained`` leaves them), and the report says so."""
    path = Path(os.path.expanduser(source.path))
    fmt = source.resolved_format()
    beside = path.parent / "config.json"
    if fmt in ("safetensors", "state_dict") and source.architecture is None and beside.is_file():
        loaded = load_file(dataclasses.replace(source, architecture=str(beside)))
        loaded.info.notes.append(f"architecture from {beside} (beside the weights; model.architecture overrides it)")
        return loaded
    if fmt == "gguf":  # llama.cpp's format: a causal LM, dequantized through transformers' GGUF reader
        from modelxray.models.gguf import GGUFSource

        return GGUFSource(path=str(path), dtype=source.dtype, device=source.device, engine=source.engine).load()
    kind = source.resolved_kind()  # None: found from the file's config, or by probing it
    if fmt == "hf_dir" and isinstance(kind, Generic):
        module, notes = _hf_module(source, path)
        return _generic(source, module, path, fmt, "hf", notes)
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
            kind=source.kind,
            image_size=source.input_shape[-1] if source.input_shape else None,
        ).load()
    if fmt in ("safetensors", "state_dict") and source.architecture is None:
        if kind is not None and not isinstance(kind, CausalLM):
            raise ConfigError(
                "model.architecture",
                f"{path.name} holds weights only; a {kind} model needs model.architecture to be built",
            )
        return _weights_only(path, fmt)
    if fmt == "torchscript":
        model = _load_torchscript(path)
        stored = _dominant_dtype(model.state_dict())
        if kind is None:  # a convolutional file whose forward runs on one image size is an image classifier
            from modelxray.models.image_shape import probed_image_shape

            probed = probed_image_shape(model)
            if probed is not None:
                shape, why = probed
                source, kind = dataclasses.replace(source, input_shape=list(shape)), ImageClassifier()
                loaded = _runnable(source, model, path, fmt, stored, kind)
                loaded.info.notes.append(f"Input: {why} (model.input_shape sets another).")
                return loaded
        if isinstance(kind, (Generic, ImageClassifier)):
            return _runnable(source, model, path, fmt, stored, kind)
        return _loaded_lm(source, model, path, fmt, stored)
    state = read_state_dict(path, fmt, source.allow_unsafe_pickle)
    stored = _dominant_dtype(state)
    if isinstance(source.architecture, dict) and "_target_" in source.architecture:
        net, kind = _build_target(source), source.resolved_kind()
    else:
        config, kind = _architecture_config(source)
        net = _build(config, kind, source)
    _load_into(net, state, path)
    if isinstance(kind, CausalLM):
        return _loaded_lm(source, net, path, fmt, stored)
    return _runnable(source, net, path, fmt, stored, kind)


def _info(path: Path, fmt: str, stored: str, notes: list[str] | None = None) -> ModelInfo:
    return ModelInfo(
        name=path.name,
        source_format=fmt,
        source_dtype=stored,
        file_path=str(path),
        file_bytes=path.stat().st_size if path.is_file() else None,
        notes=notes or [],
    )


def _loaded_lm(source: FileSource, model: torch.nn.Module, path: Path, fmt: str, stored: str) -> LoadedModel:
    tokenizer = load_tokenizer(source.tokenizer, "model.tokenizer")
    return LoadedModel(source.place(model), tokenizer, _info(path, fmt, stored))


def _runnable(source: FileSource, model: torch.nn.Module, path: Path, fmt: str, stored: str, kind: Any) -> LoadedModel:
    """An image classifier (pixels in [0, 1] -> logits) or a generic module on example inputs."""
    if isinstance(kind, Generic):
        return _generic(source, model, path, fmt, stored)
    shape = _image_shape(source, model)
    if shape is None:
        raise ConfigError(
            "model.input_shape", f"{path.name}: set one image's shape, e.g. model.input_shape=[3, 224, 224]"
        )
    if hasattr(model, "config") and not hasattr(model, "image_shape"):  # an HF image classifier built from config
        from modelxray.models.hf_vision import PixelClassifier

        c = shape[0]
        model = PixelClassifier(model, [0.0] * c, [1.0] * c, shape)
    note = "Pixels are fed in [0, 1] as the dataset stores them; normalisation, if any, is the model's own."
    return LoadedModel(
        source.place(model), None, _info(path, fmt, stored, [note]), task="classification", image_shape=shape
    )


def _image_shape(source: FileSource, model: torch.nn.Module) -> tuple[int, int, int] | None:
    if source.input_shape is not None:
        return tuple(int(d) for d in source.input_shape)
    config = getattr(model, "config", None)
    size = getattr(config, "image_size", None)
    if isinstance(size, (list, tuple)):
        size = size[0]
    if size:
        return int(getattr(config, "num_channels", 3)), int(size), int(size)
    return None


def _generic(
    source: FileSource, model: torch.nn.Module, path: Path, fmt: str, stored: str, notes: list[str] | None = None
) -> LoadedModel:
    from modelxray.models.generic import example_inputs_for

    model = source.place(model)
    inputs = example_inputs_for(model, source.inputs, source.inputs_seed, source.allow_unsafe_pickle)
    note = f"A generic model: run on its example inputs ({inputs.source}); quality is agreement with its own unquantized outputs."
    return LoadedModel(
        model, None, _info(path, fmt, stored, [note, *(notes or [])]), task="generic", example_inputs=inputs
    )


def _hf_module(source: FileSource, path: Path) -> tuple[torch.nn.Module, list[str]]:
    """An HF directory as the class its config names (``architectures``: a detector with its heads),
    else a bare ``AutoModel``: the generic kind. Notes say which class, and what of the checkpoint
    the class has no place for (dropped, never silently)."""
    import transformers
    from transformers import AutoConfig, AutoModel

    kwargs = {"dtype": source.torch_dtype(), "local_files_only": True, "trust_remote_code": source.trust_remote_code}
    config = AutoConfig.from_pretrained(str(path), local_files_only=True, trust_remote_code=source.trust_remote_code)
    named = (getattr(config, "architectures", None) or [None])[0]
    cls = getattr(transformers, named, None) if named else None
    model, info = (cls or AutoModel).from_pretrained(str(path), output_loading_info=True, **kwargs)
    notes = [
        f"Loaded as {type(model).__name__}"
        + (" (the class config.json names)." if cls else " (config.json names no class transformers has).")
    ]
    dropped = sorted(info.get("unexpected_keys") or [])
    if dropped:
        shown = listed(dropped)
        notes.append(
            f"{len(dropped)} tensors of the checkpoint have no place in {type(model).__name__} and were dropped: {shown}."
        )
    return model, notes


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


def _architecture_config(source: FileSource) -> tuple[object, Any]:
    """The transformers config ``model.architecture`` describes, and the kind of model to build."""
    from transformers import AutoConfig

    from modelxray.kinds.table import kind_of_config
    from modelxray.kinds.vision_language import DualEncoder

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
    kind = source.resolved_kind() or kind_of_config(config, f"model.architecture {source.architecture!r}")
    if isinstance(kind, DualEncoder):
        raise ConfigError(
            "model.architecture",
            "a vision_language model loads from a Hugging Face directory (model=hf), not a state dict",
        )
    return config, kind


# factories of models that may be named by a _target_ function (any nn.Module class may be)
def _build_target(source: FileSource) -> torch.nn.Module:
    """Any ``nn.Module`` named by ``_target_`` (a class, or a model factory returning one), called
    with the mapping's other keys, the way Hydra instantiates it."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    arch = dict(source.architecture)
    check_targets(arch, "model.architecture", getattr(source, "trust_remote_code", False))
    try:
        module = instantiate(arch)
    except InstantiationException as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ConfigError("model.architecture._target_", f"cannot build {arch['_target_']!r}: {first}") from None
    if not isinstance(module, torch.nn.Module):
        raise ConfigError(
            "model.architecture._target_", f"{arch['_target_']!r} built a {type(module).__name__}, not an nn.Module"
        )
    return module


def _build(config: object, kind: Any, source: FileSource) -> torch.nn.Module:
    """A causal LM or an image classifier by its own Auto class (its head); any other kind as the bare model."""
    import transformers

    auto = kind.auto_class if isinstance(kind, (CausalLM, ImageClassifier)) else "AutoModel"
    return getattr(transformers, auto).from_config(config, trust_remote_code=source.trust_remote_code)


def _dominant_dtype(state: dict[str, torch.Tensor]) -> str:
    counts: dict[str, int] = {}
    for t in state.values():
        if isinstance(t, torch.Tensor):
            key = str(t.dtype).replace("torch.", "")
            counts[key] = counts.get(key, 0) + t.numel()
    return max(counts, key=counts.get) if counts else "unknown"


def _load_into(model: torch.nn.Module, state: dict[str, torch.Tensor], path: Path) -> None:
    _check_shapes(model, state, path)
    result = model.load_state_dict(state, strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or [])
    # a tensor the model shares under several names (tied embeddings) is saved once by safetensors'
    # save_model, under any one of them: a name is missing only when none of its aliases was saved
    aliases: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        aliases.setdefault(id(p), []).append(name)
    saved_as = {n: any(a in state for a in names) for names in aliases.values() for n in names}
    missing = [
        k
        for k in result.missing_keys
        if k not in tied and not k.endswith("lm_head.weight") and not saved_as.get(k, False)
    ]
    if missing or result.unexpected_keys:
        bad = (missing or result.unexpected_keys)[:3]
        raise ConfigError(
            str(path),
            f"does not match model.architecture: missing {missing[:3]}, unexpected "
            f"{result.unexpected_keys[:3]} (e.g. {bad})",
        )
    if hasattr(model, "tie_weights"):
        model.tie_weights()


def _check_shapes(model: torch.nn.Module, state: dict[str, torch.Tensor], path: Path) -> None:
    """Tensors whose shape differs from the built model's: one line naming the first, not torch's
    multi-line ``size mismatch`` traceback (weights saved from another configuration)."""
    expected = model.state_dict()
    bad = [k for k, v in state.items() if k in expected and tuple(v.shape) != tuple(expected[k].shape)]
    if bad:
        first = bad[0]
        raise ConfigError(
            str(path),
            f"does not fit model.architecture: {first} is {list(state[first].shape)} in the file and "
            f"{list(expected[first].shape)} in the model ({len(bad)} of {len(state)} tensors differ); "
            "set model.architecture to the configuration the weights were saved with",
        )


def _load_torchscript(path: Path) -> torch.nn.Module:
    try:
        return torch.jit.load(str(path), map_location="cpu")
    except (RuntimeError, OSError, ValueError) as exc:
        raise ConfigError(
            str(path), f"not a readable TorchScript file (truncated or corrupt?): {str(exc).splitlines()[0]}"
        ) from None
