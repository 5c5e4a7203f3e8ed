"""``runtime.offload``: whether the run holds the whole model in memory or streams it from disk one
block at a time, decided before any weight is read, from the sizes in the weight files' headers and
the memory the run may use; and the one-line refusals of what cannot stream."""

from __future__ import annotations

from dataclasses import dataclass

from modelxray.config.settings import parse_bytes
from modelxray.core.errors import ConfigError
from modelxray.core.formatting import human_bytes

IN_MEMORY = "none"
BLOCKS = "blocks"


@dataclass(frozen=True)
class OffloadChoice:
    """What the run does with the weights and why (logged as ``runtime/offload`` and its reason)."""

    mode: str  # none | blocks
    reason: str
    weights_bytes: int | None = None  # the weights at the run's dtype
    limit_bytes: int | None = None  # the memory the run may use
    block_bytes: int | None = None  # the largest block at the run's dtype

    def hidden_budget(self) -> int | None:
        """Bytes of hidden states a stream keeps in memory: what the limit leaves beside a block read,
        its quantized copy and the head (about three blocks); the rest goes to disk."""
        if self.limit_bytes is None or self.block_bytes is None:
            return None
        return max(0, self.limit_bytes - 3 * self.block_bytes)

    def params(self) -> dict[str, str]:
        out = {"runtime/offload": self.mode, "runtime/offload_reason": self.reason}
        if self.limit_bytes is not None:
            out["runtime/max_memory_bytes"] = str(self.limit_bytes)
        return out


def memory_limit(runtime) -> tuple[int, str]:
    """The memory the run may use and where that figure comes from."""
    if runtime.max_memory is not None:
        return parse_bytes(runtime.max_memory, "runtime.max_memory"), "runtime.max_memory"
    import psutil

    available = psutil.virtual_memory().available
    limit = int(available * (1.0 - runtime.memory_headroom))
    return limit, f"{human_bytes(available)} available, less runtime.memory_headroom={runtime.memory_headroom:g}"


def choose_offload(runtime, components) -> OffloadChoice:
    """``none`` or ``blocks`` for this run, with the reason, and the checks of a streamed run (a limit
    below one block, an analyzer, quantizer, reference or training that cannot stream), all before
    any weight is read."""
    asked = runtime.offload
    if asked == IN_MEMORY or components.model is None:
        why = "runtime.offload=none" if asked == IN_MEMORY else "the model was given in memory"
        return OffloadChoice(IN_MEMORY, why)
    try:
        weights = components.model.block_weights()
    except ConfigError as exc:
        if asked == BLOCKS:
            raise
        return OffloadChoice(IN_MEMORY, f"runtime.offload=auto: this model is read whole ({exc.message.split(';')[0]})")
    import torch

    size = torch.empty((), dtype=components.model.torch_dtype()).element_size()
    total = weights.nbytes(None, size)
    block_name, block = largest_block(weights, size)
    limit, where = memory_limit(runtime)
    dtype = components.model.dtype
    if asked == BLOCKS:
        choice = OffloadChoice(BLOCKS, "runtime.offload=blocks", total, limit, block)
    elif total > limit:
        reason = (
            f"runtime.offload=auto: the weights ({human_bytes(total)} in {dtype}) exceed the memory this run may "
            f"use ({human_bytes(limit)}: {where})"
        )
        choice = OffloadChoice(BLOCKS, reason, total, limit, block)
    else:
        reason = (
            f"runtime.offload=auto: the weights ({human_bytes(total)} in {dtype}) fit the memory this run may use "
            f"({human_bytes(limit)}: {where})"
        )
        return OffloadChoice(IN_MEMORY, reason, total, limit, block)
    if block is not None and limit < block:
        raise ConfigError(
            "runtime.max_memory",
            f"{human_bytes(limit)} is less than one block of the model ({human_bytes(block)} in {dtype}, "
            f"{block_name}), which a streamed run holds at once: give at least {human_bytes(2 * block)}",
        )
    check_streaming(components, choice)
    return choice


def largest_block(weights, element_size: int) -> tuple[str | None, int | None]:
    """The largest block of the model's chain (tensors named ``<chain>.<i>.``), by the files' names alone."""
    import re

    groups: dict[str, dict[str, list[str]]] = {}
    for name in weights.names:
        match = re.match(r"^(.*?)\.(\d+)\.", name)
        if match:
            groups.setdefault(match.group(1), {}).setdefault(match.group(2), []).append(name)
    if not groups:
        return None, None
    chain = max(groups, key=lambda g: len(groups[g]))
    sizes = {i: weights.nbytes(names, element_size) for i, names in groups[chain].items()}
    index = max(sizes, key=sizes.get)
    return f"{chain}.{index}", sizes[index]


def check_streaming(components, choice: OffloadChoice) -> None:
    """What a streamed run cannot do yet, each a line naming ``runtime.offload=none``."""
    from modelxray.quant.streamed import streams_blocks

    why = "" if choice.reason == "runtime.offload=blocks" else f" ({choice.reason})"

    def refuse(what: str) -> ConfigError:
        return ConfigError(
            "runtime.offload", f"the model streams block by block{why}, and {what}: use runtime.offload=none"
        )

    for name, analyzer in components.analyzers.items():
        if not getattr(analyzer, "streams_blocks", False):
            raise refuse(f"analyzer={name} needs the whole model in memory (analyzer=performance streams)")
    quant = components.quant
    if quant is not None and quant.name != "none" and not streams_blocks(quant):
        raise refuse(
            f"this quantizer ({quant.name}) works on the whole model at once (round-to-nearest, int8, int4 ..., streams)"
        )
    if components.reference is not None:
        raise refuse("reference= needs the other model in memory (the unquantized model streams alongside)")
    if components.train is not None:
        raise refuse("train= needs the whole model in memory")
