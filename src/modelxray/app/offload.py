"""``runtime.offload``: whether the run holds the whole model in memory or streams it from disk one
block at a time, decided before any weight is read, from the sizes in the weight files' headers and
the memory the run may use; and the one-line refusals of what cannot stream."""

from __future__ import annotations

from dataclasses import dataclass

from modelxray.config.settings import parse_bytes
from modelxray.core.errors import ConfigError
from modelxray.core.formatting import human_bytes, listed

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
    outside_bytes: int | None = None  # embeddings, final norm and head: read together for the logits

    def hidden_budget(self) -> int | None:
        """Bytes of hidden states a stream keeps in memory: what the limit leaves beside the largest
        part read at once (a block and its quantization's work, or the embeddings and head); the rest
        goes to disk."""
        if self.limit_bytes is None or self.block_bytes is None:
            return None
        return max(0, self.limit_bytes - max(2 * self.block_bytes, self.outside_bytes or 0))

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
    """``none`` or ``blocks`` for this run, with the reason, decided before any weight is read.
    ``blocks`` asked for and refused (a limit below one block, an analyzer, quantizer, reference or
    training that cannot stream) is one line; ``auto`` then holds the model in memory and says why."""
    asked = runtime.offload
    if getattr(components.model, "device_map", None) is not None:
        if asked == BLOCKS:
            raise ConfigError(
                "runtime.offload",
                "blocks streams the model itself, and model.device_map places it with accelerate: use one of them",
            )
        return OffloadChoice(IN_MEMORY, "model.device_map places the model's modules (accelerate)")
    refuse_oversized_torchscript(runtime, components.model)
    if asked == IN_MEMORY or components.model is None:
        why = "runtime.offload=none" if asked == IN_MEMORY else "the model was given in memory"
        return OffloadChoice(IN_MEMORY, why)
    try:
        weights = components.model.block_weights()
    except ConfigError as exc:
        if asked == BLOCKS:
            raise
        why = exc.message.split(";")[0]
        if not _held_or_on_gpu(components.model):
            _refuse_too_large(runtime, components.model.estimated_bytes(), components.model.dtype, why)
        return OffloadChoice(IN_MEMORY, f"runtime.offload=auto: this model is read whole ({why})")
    import torch

    size = torch.empty((), dtype=components.model.torch_dtype()).element_size()
    total = weights.nbytes(None, size)
    block_name, block, outside = largest_block(weights, size)
    limit, where = memory_limit(runtime)
    dtype = components.model.dtype
    sizes = dict(weights_bytes=total, limit_bytes=limit, block_bytes=block, outside_bytes=outside)
    if asked == BLOCKS:
        choice = OffloadChoice(BLOCKS, "runtime.offload=blocks", **sizes)
        refusals = why_not_streamed(components, choice, block_name)
        if refusals:
            key, what, instead = refusals[0]
            raise ConfigError(
                key,
                f"{what}: {instead}"
                if key != "runtime.offload"
                else f"blocks cannot stream this run: {what}: {instead}",
            )
        return choice
    weighed = f"the weights ({human_bytes(total)} in {dtype})"
    allowed = f"the memory this run may use ({human_bytes(limit)}: {where})"
    if total <= limit:
        return OffloadChoice(IN_MEMORY, f"runtime.offload=auto: {weighed} fit {allowed}", **sizes)
    reason = f"runtime.offload=auto: {weighed} exceed {allowed}"
    choice = OffloadChoice(BLOCKS, reason, **sizes)
    refusals = why_not_streamed(components, choice, block_name)
    if refusals:
        _, what, instead = refusals[0]
        if not _held_or_on_gpu(components.model):
            _refuse_too_large(runtime, total, dtype, f"it cannot stream block by block ({what}: {instead})")
        return OffloadChoice(IN_MEMORY, f"{reason}, but it cannot stream ({what}), so it is held", **sizes)
    return choice


def _held_or_on_gpu(model) -> bool:
    """A model this process holds already (a sweep's earlier job loaded it: no new memory), or one
    loaded onto a GPU (the host's free memory is not what it needs)."""
    import torch

    from modelxray.models import process_cache

    device = str(getattr(model, "device", "cpu"))
    return (
        process_cache.is_cached(model) or device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    )


def _refuse_too_large(runtime, size: int | None, dtype: str, why_not_streamed: str) -> None:
    """A model larger than the memory the run may use, which cannot stream, is refused before anything
    is built: one line with its size, the limit and why it cannot stream (``runtime.offload=none``
    holds it in memory anyway)."""
    limit, where = memory_limit(runtime)
    if size is None or size <= limit:
        return
    raise ConfigError(
        "model",
        f"the model holds {human_bytes(size)} of weights in {dtype}, more than the memory this run may use "
        f"({human_bytes(limit)}: {where}), and {why_not_streamed}; choose a smaller model or dtype, give more "
        "memory (runtime.max_memory), or set runtime.offload=none to hold it in memory anyway",
    )


def refuse_oversized_torchscript(runtime, model) -> None:
    """A TorchScript file loads whole: one larger than the memory the run may use is refused here,
    before loading, in one line naming the alternative (a state dict, which is memory-mapped)."""
    import os
    from pathlib import Path

    from modelxray.metrics.memory_layout import torchscript_too_large

    resolved = getattr(model, "resolved_format", None)
    if model is None or resolved is None or resolved() != "torchscript":
        return
    limit, where = memory_limit(runtime)
    line = torchscript_too_large(Path(os.path.expanduser(model.path)).stat().st_size, limit, where)
    if line is not None:
        raise ConfigError("model.path", line)


def largest_block(weights, element_size: int) -> tuple[str | None, int | None, int | None]:
    """The largest block of the model's chain (tensors named ``<chain>.<i>.``), its bytes, and the bytes
    of everything outside the chain (embeddings, head: read together for the logits), by the files'
    names alone."""
    import re

    groups: dict[str, dict[str, list[str]]] = {}
    for name in weights.names:
        match = re.match(r"^(.*?)\.(\d+)\.", name)
        if match:
            groups.setdefault(match.group(1), {}).setdefault(match.group(2), []).append(name)
    if not groups:
        return None, None, None
    chain = max(groups, key=lambda g: len(groups[g]))
    sizes = {i: weights.nbytes(names, element_size) for i, names in groups[chain].items()}
    index = max(sizes, key=sizes.get)
    outside = weights.nbytes(None, element_size) - sum(sizes.values())
    return f"{chain}.{index}", sizes[index], outside


def streaming_analyzers() -> list[str]:
    """The analyzers that run on a model streamed block by block (their ``streams_blocks``)."""
    import importlib
    import pkgutil

    from modelxray import analyzers
    from modelxray.analyzers.base import Analyzer

    out = []
    for info in pkgutil.iter_modules(analyzers.__path__):
        if info.ispkg:
            module = importlib.import_module(f"modelxray.analyzers.{info.name}.config")
            out += [
                f"analyzer={obj.name}"
                for obj in vars(module).values()
                if isinstance(obj, type) and issubclass(obj, Analyzer) and obj is not Analyzer and obj.streams_blocks
            ]
    return sorted(set(out))


def why_not_streamed(components, choice: OffloadChoice, block_name: str | None) -> list[tuple[str, str, str]]:
    """What keeps this run from streaming, as ``(key, what, instead)`` (none: it streams)."""
    from modelxray.models import process_cache
    from modelxray.quant.streamed import streams_blocks

    asked = choice.reason == "runtime.offload=blocks"
    out = []

    def refuse(what: str, instead: str = "use runtime.offload=none") -> None:
        out.append(("runtime.offload", what, instead))

    if choice.block_bytes is not None and choice.limit_bytes < choice.block_bytes:
        out.append(
            (
                "runtime.max_memory",
                f"{human_bytes(choice.limit_bytes)} is less than one block of the model "
                f"({human_bytes(choice.block_bytes)} in {components.model.dtype}, {block_name}), which a streamed run "
                "holds at once",
                f"give at least {human_bytes(2 * choice.block_bytes)}",
            )
        )
    device = components.model.device
    if device not in ("auto", "cpu"):
        refuse(f"streaming runs on the CPU for now, not model.device={device}", "use model.device=cpu")
    elif device == "auto" and not asked:
        import torch

        if torch.cuda.is_available():
            refuse("streaming runs on the CPU for now, and this machine has a GPU")
    quant = components.quant
    for name, analyzer in components.analyzers.items():
        if not getattr(analyzer, "streams_blocks", False):
            refuse(f"analyzer={name} needs the whole model in memory ({listed(streaming_analyzers(), 4)} stream)")
        elif analyzer.stream_refusal(quant) is not None:
            out.append(analyzer.stream_refusal(quant))
    if quant is not None and quant.name != "none" and not streams_blocks(quant):
        refuse(
            f"this quantizer ({quant.name}) works on the whole model at once (round-to-nearest: int8, int4 ...; "
            "GPTQ, AWQ and HQQ stream)"
        )
    if components.reference is not None:
        refuse("reference= needs the other model in memory (the unquantized model streams alongside)")
    if components.train is not None:
        refuse("train= needs the whole model in memory")
    if not asked and process_cache.is_cached(components.model):
        refuse("this process holds the model already (a sweep's earlier job loaded it)")
    return out
