"""A model's chain of blocks and what its blocks are called with: which ModuleList is the chain,
and a block's hidden states apart from its other arguments (positions, masks), with any KV cache
dropped (it would grow at every replay of the block). Shared by the block stream and the
calibration of GPTQ and AWQ."""

from __future__ import annotations

from typing import Any

from torch import nn

CACHE_ARGUMENTS = ("past_key_values", "past_key_value", "layer_past", "cache_params", "cache")


def block_call(args: tuple, kwargs: dict[str, Any]) -> tuple[Any, tuple, dict[str, Any]]:
    """A block's call as ``(hidden states, other positional arguments, keyword arguments)``, with no
    KV cache and ``use_cache`` off, to replay the block on the same arguments."""
    kwargs = {k: v for k, v in kwargs.items() if k not in CACHE_ARGUMENTS}
    if "use_cache" in kwargs:
        kwargs["use_cache"] = False
    hidden = args[0] if args else kwargs.pop("hidden_states")
    return hidden, tuple(args[1:]), kwargs


def inside(name: str, prefix: str) -> bool:
    """Whether the module ``name`` is ``prefix`` or lies under it (every module lies under "")."""
    return not prefix or name == prefix or name.startswith(prefix + ".")


def chain_of_blocks(model: nn.Module) -> str | None:
    """The name of the model's chain of blocks: the ModuleList of the model's own repeated block class
    (transformers' ``_no_split_modules``), else its largest ModuleList of one class; None without one."""
    block_classes = set(getattr(model, "_no_split_modules", None) or ())
    best, best_size = None, 0
    for name, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) < 2:
            continue
        classes = {type(child).__name__ for child in module}
        if len(classes) != 1:
            continue
        size = sum(p.numel() for p in module.parameters())
        if block_classes and classes <= block_classes:
            size += 1 << 62  # the model's own block class wins over any other list
        if size > best_size:
            best, best_size = name, size
    return best
