"""Loading a Hugging Face model from the local cache only, with nothing asked of the hub."""

from __future__ import annotations


def model_kwargs(kwargs: dict) -> dict:
    """``from_pretrained`` keywords for a model: loading from the cache only covers transformers' adapter
    lookup too (with peft installed it asks the hub for ``adapter_config.json`` and retries a dead
    endpoint for about 20 s, whatever ``local_files_only`` says)."""
    if kwargs.get("local_files_only"):
        return {**kwargs, "adapter_kwargs": {"local_files_only": True}}
    return kwargs
