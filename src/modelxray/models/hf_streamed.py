"""A Hugging Face model streamed from disk (``runtime.offload=blocks``): a causal or masked language
model built on the meta device from its config (no weight read), its safetensors files read a block
at a time by ``models.block_stream``. A hub id streams from the local Hugging Face cache's copy."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from modelxray.core.errors import ConfigError
from modelxray.core.formatting import listed
from modelxray.core.subject import LoadedModel, ModelInfo
from modelxray.models.safetensors_dir import SafetensorsDir


def weights_dir(source: Any) -> Path:
    """The directory holding the model's files: a local directory, or a cached hub model's snapshot."""
    local = Path(os.path.expanduser(source.name_or_path))
    if local.is_dir():
        return local
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(source.name_or_path, revision=source.revision, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached (or not a repo id): the line below says what to do
        raise ConfigError(
            "runtime.offload",
            f"blocks reads a model's files one block at a time, and {source.name_or_path!r} is not in the local "
            "Hugging Face cache: download it first (huggingface-cli download) or pass its directory",
        ) from None


def block_weights(source: Any) -> SafetensorsDir:
    """The model's safetensors files, for a kind that streams (``Kind.streams_from_disk``) whose blocks all
    take the same arguments; one line otherwise. Read from config.json and the files' headers only."""
    import json

    from modelxray.models.hf_dir import declared_from_dir

    directory = weights_dir(source)
    from modelxray.kinds.table import KINDS

    kind = declared_from_dir(directory, source.kind, source.name_or_path).kind
    if not kind.streams_from_disk:
        raise ConfigError(
            "runtime.offload",
            f"blocks streams {' and '.join(k.noun + 's' for k in KINDS if k.streams_from_disk)}, and "
            f"{source.name_or_path} is a {kind} model: use runtime.offload=none",
        )
    fields = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    text = fields.get("text_config") if isinstance(fields.get("text_config"), dict) else fields
    layer_types = text.get("layer_types")
    if isinstance(layer_types, list) and len(set(map(str, layer_types))) > 1:
        raise ConfigError(
            "runtime.offload",
            f"blocks gives every block the first block's attention mask and positions, and {source.name_or_path} "
            f"mixes layer types ({', '.join(sorted(set(map(str, layer_types))))}), each with its own: use "
            "runtime.offload=none",
        )
    return SafetensorsDir(directory, "model.name_or_path")


def load_streamed(source: Any, hidden_budget: int | None, reason: str) -> LoadedModel:
    """The model on the meta device (buffers real), tied as its config says, with its ``BlockStream``."""
    import transformers
    from accelerate import init_empty_weights
    from transformers import AutoConfig

    from modelxray.kinds.table import chosen_or_found
    from modelxray.models.block_inputs import chain_of_blocks
    from modelxray.models.block_stream import BlockStream
    from modelxray.models.hf_dir import dir_bytes

    weights = block_weights(source)
    path = str(weights.directory)
    kwargs = dict(trust_remote_code=source.trust_remote_code, local_files_only=True)
    config = AutoConfig.from_pretrained(path, **kwargs)
    kind = chosen_or_found(source.kind, config, source.name_or_path)
    if not kind.streams_from_disk:
        raise ConfigError("runtime.offload", f"{source.name_or_path} is a {kind} model, which does not stream")
    auto = getattr(transformers, kind.auto_class)
    with init_empty_weights(include_buffers=False):
        model = auto.from_config(config, dtype=source.torch_dtype(), trust_remote_code=source.trust_remote_code)
    model.tie_weights()
    model.eval()
    for module in model.modules():  # buffers (rotary frequencies) in the run's dtype, as an in-memory load casts them
        for name, buffer in module._buffers.items():
            if buffer is not None and buffer.is_floating_point() and buffer.device.type != "meta":
                module._buffers[name] = buffer.to(source.torch_dtype())
    blocks = chain_of_blocks(model)
    if blocks is None:
        raise ConfigError(
            "runtime.offload",
            f"{source.name_or_path} ({type(model).__name__}) has no chain of blocks to read one at a time: "
            "use runtime.offload=none",
        )
    stream = BlockStream(model, weights, source.torch_dtype(), blocks, hidden_budget=hidden_budget, reason=reason)
    missing = stream.missing()
    if missing:
        shown = listed(missing)
        raise ConfigError(
            "model.name_or_path",
            f"{path} holds no tensor for {shown}, which {type(model).__name__} has: save the model again with "
            "save_pretrained, or use runtime.offload=none",
        )
    from modelxray.models.hf_tasks import load_kind_tokenizer

    tokenizer = load_kind_tokenizer(source, kind, path, kwargs)
    stored = str(getattr(config, "dtype", None) or "unknown").replace("torch.", "")
    info = ModelInfo(
        name=source.name_or_path,
        source_format="hf",
        source_dtype=stored,
        file_path=path,
        file_bytes=dir_bytes(weights.directory),
        notes=[f"Streamed from disk one block at a time ({reason})."],
    )
    return LoadedModel(model, tokenizer, info, task=kind.task, kind=kind, stream=stream)
