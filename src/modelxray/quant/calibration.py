"""Drive a transformer block by block on calibration data (what GPTQ and AWQ need).

The inputs of the first block are caught with a forward pre-hook that stops the forward pass (the
"catcher" trick of the GPTQ reference code), keeping the keyword arguments the model passes to its
blocks (attention mask, rotary position embeddings, ...). Each block then runs on those inputs,
and its outputs feed the next block, so a block is calibrated on what the already-quantized
blocks before it produce.

Calibration data comes from the run's dataset (``subject_calibration``: the windows after the
evaluated span) or from the caller of ``modelxray.quantize`` (``as_calibration``: token-id batches).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from modelxray.core.errors import ConfigError
from modelxray.measure.scoring import forward_logits, model_device
from modelxray.quant.targets import _is_conv1d


class _Caught(Exception):
    pass


def decoder_blocks(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """The longest ModuleList whose entries hold linear layers: ``model.layers``, ``transformer.h``..."""
    best: tuple[str, nn.ModuleList] | None = None
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) > 0:
            has_linear = any(isinstance(m, nn.Linear) or _is_conv1d(m) for m in module[0].modules())
            if has_linear and (best is None or len(module) > len(best[1])):
                best = (name, module)
    if best is None:
        raise ConfigError(
            "quant",
            "calibration-based quantization needs a model made of repeated blocks "
            "(a ModuleList of layers); use an RTN config (quant=int4) for this model",
        )
    return best


@dataclass
class Calibration:
    """Token ids to calibrate on, in chunks of equal-length rows, and what they are (for the report)."""

    chunks: list[torch.Tensor]  # (rows, seq_len) int64 each
    origin: str  # e.g. "windows after the evaluated span"

    @property
    def n_windows(self) -> int:
        return sum(c.shape[0] for c in self.chunks)

    def batches(self, batch_size: int) -> Iterator[torch.Tensor]:
        for chunk in self.chunks:
            yield from chunk.split(batch_size)


class BlockInputs:
    """Per calibration batch: the hidden states entering the current block and the block kwargs."""

    def __init__(self, model: nn.Module, blocks: nn.ModuleList, batches: Iterable[torch.Tensor]):
        self.hidden: list[torch.Tensor] = []
        self.kwargs: list[dict[str, Any]] = []
        device = model_device(model)

        def catch(_module, args, kwargs):
            hidden = args[0] if args else kwargs.pop("hidden_states")
            self.hidden.append(hidden.detach())
            self.kwargs.append(dict(kwargs))
            raise _Caught

        handle = blocks[0].register_forward_pre_hook(catch, with_kwargs=True)
        try:
            with torch.inference_mode():
                for batch in batches:
                    try:
                        forward_logits(model, batch.to(device))
                    except _Caught:
                        pass
        finally:
            handle.remove()

    def __iter__(self) -> Iterator[tuple[torch.Tensor, dict[str, Any]]]:
        return iter(zip(self.hidden, self.kwargs))

    @property
    def n_tokens(self) -> int:
        return sum(h.shape[0] * h.shape[1] for h in self.hidden)

    def observe(self, block: nn.Module, layer_targets, fn) -> None:
        """Run ``block`` on every batch and call ``fn(name, x, raw)`` with each target layer's input
        (``x`` flattened to (tokens, features) in float32, ``raw`` as the layer received it)."""
        handles = []
        for t in layer_targets:

            def hook(_m, args, _out, name=t.name):
                raw = args[0].detach()
                fn(name, raw.reshape(-1, raw.shape[-1]).float(), raw)

            handles.append(t.module.register_forward_hook(hook))
        try:
            self.run(block, update=False)
        finally:
            for h in handles:
                h.remove()

    def run(self, block: nn.Module, update: bool) -> None:
        """Run ``block`` on every batch; with ``update`` its outputs become the next block's inputs."""
        with torch.inference_mode():
            for i, (hidden, kwargs) in enumerate(self):
                out = block(hidden, **kwargs)
                out = out[0] if isinstance(out, (tuple, list)) else out
                if update:
                    self.hidden[i] = out.detach()


def calibration_windows(subject) -> torch.Tensor:
    data = subject.data
    if getattr(subject, "task", "causal_lm") != "causal_lm":
        raise ConfigError(
            "quant",
            f"calibration-based quantization (GPTQ, AWQ) needs a language model and its "
            f"token windows; {subject.info.name} is a {subject.task} model: use RTN, e.g. quant=int4",
        )
    if data is None or data.calibration is None or data.calibration.shape[0] == 0:
        raise ConfigError(
            "dataset.calibration_windows",
            "no calibration windows: the dataset has no tokens after "
            "the evaluated span; lower dataset.max_tokens or raise dataset.calibration_windows",
        )
    return data.calibration


def subject_calibration(subject) -> Calibration:
    """The run's calibration data: the dataset's windows after the evaluated span."""
    return Calibration([calibration_windows(subject)], "windows after the evaluated span")


def as_calibration(data: Any, method: str) -> Calibration:
    """The ``calibration=`` of ``modelxray.quantize``: a LongTensor (batch, seq), a list of them, or a
    DataLoader yielding them (or mappings with ``input_ids``)."""
    if data is None:
        raise ConfigError(
            "calibration",
            f"{method} calibrates on token ids: pass calibration= a LongTensor [batch, seq], "
            "a list of them or a DataLoader yielding them",
        )
    items = [data] if isinstance(data, (torch.Tensor, Mapping)) else list(data)
    chunks = [_token_batch(item, i) for i, item in enumerate(items)]
    if not chunks or sum(c.shape[0] for c in chunks) == 0:
        raise ConfigError("calibration", f"is empty: {method} needs at least one sequence of token ids")
    return Calibration(chunks, "calibration sequences")


def _token_batch(item: Any, index: int) -> torch.Tensor:
    ids = item["input_ids"] if isinstance(item, Mapping) else item
    ids = torch.as_tensor(ids)
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if ids.dim() != 2 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise ConfigError(
            "calibration",
            f"batch {index}: expected integer token ids of shape [batch, seq], got {ids.dtype} {tuple(ids.shape)}",
        )
    return ids.long()
