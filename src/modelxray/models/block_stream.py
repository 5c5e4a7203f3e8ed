"""A model larger than memory, run one block at a time (``runtime.offload=blocks``).

The model is built on the meta device (its buffers real, its parameters shapes only). Every window
passes through block i before block i+1 is read, so the weights are read from disk about once per
pass, and the hidden states of all windows are what is held between blocks (spilled to disk beyond a
budget). A block's tensors are dropped before the next block is read.

Several *variants* stream together: the float model and, say, its quantized copy, or every plan an
analyzer compares. Each block is read once, transformed in place for each variant (quantized, then
put back as stored) and run for it, so the reference needs no second read of the model. A variant
shares the float path's hidden states until the first block it changes (a plan quantizing block 5
alone runs blocks 0-4 once, for all), and may score only the first batches (a probe). Modules outside the blocks (embeddings, final norm,
head) are read when the model's own forward first calls them, so the model's forward itself builds
the blocks' inputs (position embeddings, masks) and turns the last hidden states into logits: no
architecture is special-cased.

Written here because accelerate's disk offload reloads every layer for every batch (its hooks onload
a module per call), and llm-compressor's sequential onloading calibrates but does not evaluate or
compare: neither runs all windows through one block before reading the next.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from modelxray.core.progress import bar
from modelxray.measure.scoring import forward_logits
from modelxray.models.block_inputs import block_call, inside
from modelxray.models.hidden_states import HiddenStates, StreamStats
from modelxray.models.safetensors_dir import SafetensorsDir


class Transform(Protocol):
    """What a variant does to freshly read weights (a quantizer, block by block). A transform that
    calibrates (GPTQ, AWQ) also has ``calibration_batches()`` (token batches) and ``start(caught)``,
    which receives those batches' inputs to the first block, caught with the evaluation's. One that
    swaps modules (a library quantizer) also has ``undo(prefix)``, which puts the block's own back."""

    def apply(self, prefix: str, done: dict) -> None: ...  # change the modules under ``prefix`` in place

    def touches(self, prefix: str) -> bool: ...  # whether any module under ``prefix`` is changed


class _Caught(Exception):
    pass


@dataclass
class BlockStream:
    """A meta-device model with its weights on disk, run block by block (see the module docstring)."""

    model: nn.Module
    weights: SafetensorsDir
    dtype: torch.dtype
    blocks_name: str
    hidden_budget: int | None = None  # bytes of hidden states kept in memory; beyond, on disk
    stats: StreamStats = field(default_factory=StreamStats)
    transform: Any = None  # set by the run's quant stage: the quantized path's per-block transform
    reason: str = ""  # why the run streams (runtime.offload)
    spill_dir: Path | None = None  # where hidden states beyond the budget go (the run's directory)

    def __post_init__(self):
        self.blocks = self.model.get_submodule(self.blocks_name)
        self.block_prefixes = [f"{self.blocks_name}.{i}" for i in range(len(self.blocks))]
        # a parameter several modules share (a head tied to the embeddings) is stored once in the files
        self.tied: dict[str, str] = {}
        by_id: dict[int, list[str]] = {}
        for name, p in self.model.named_parameters(remove_duplicate=False):
            by_id.setdefault(id(p), []).append(name)
        for names in by_id.values():
            stored = [n for n in names if n in self.weights.names]
            self.tied.update({n: stored[0] for n in names if stored and n not in self.weights.names})
        self._live: list[tuple[nn.Module, str, str]] = []  # (module, leaf, name) read in this stage
        self._by_source: dict[str, torch.Tensor] = {}  # read in this stage, by the name the files give
        self._meta: dict[str, nn.Parameter] = {}  # the meta parameter a read one replaced, by name
        self._sharing: dict[str, list[str]] = {}  # file name -> the model's names of that tensor
        self._tuple = False  # the blocks return a tuple (hidden states first), not a tensor
        self._before_blocks: dict[str, list] = {}  # module -> its output shapes before the first block, per call
        self._stand_in: dict[str, list] | None = None  # while the logits are made: the shapes still to give
        self._past_blocks = False  # the forward has passed the blocks (a module called now runs for real)
        for name in self._tensor_names():
            with contextlib.suppress(KeyError):  # a tensor the files lack: missing() names it
                self._sharing.setdefault(self._source(name), []).append(name)

    # -- sizes ----------------------------------------------------------------------------
    def model_bytes(self) -> int:
        """Bytes of the model's weights at the run's dtype (tied weights once)."""
        return self.weights.nbytes(None, _element_size(self.dtype))

    def block_bytes(self) -> int:
        """Bytes of the largest block at the run's dtype: the least memory a streamed run needs."""
        size = _element_size(self.dtype)
        return max(self.weights.nbytes(self._names_under(p), size) for p in self.block_prefixes)

    def _names_under(self, prefix: str) -> list[str]:
        return [self._source(n) for n in self._tensor_names() if inside(n, prefix)]

    def _tensor_names(self) -> list[str]:
        names = [n for n, _ in self.model.named_parameters(remove_duplicate=False)]
        return names + [n for n, _ in self.model.named_buffers(remove_duplicate=False) if n in self.weights.names]

    def _source(self, name: str) -> str:
        if name in self.weights.names:
            return name
        if self.tied.get(name) in self.weights.names:
            return self.tied[name]
        raise KeyError(name)

    def missing(self) -> list[str]:
        """Parameters the files hold under no name (nor a tied one): a streamed run cannot start."""
        out = []
        for name, _ in self.model.named_parameters(remove_duplicate=False):
            try:
                self._source(name)
            except KeyError:
                out.append(name)
        return out

    # -- reading and dropping a module's tensors --------------------------------------------
    def _read(self, prefix: str, recurse: bool = True) -> list[str]:
        """Read the tensors of the module ``prefix`` (with ``recurse``, of all its submodules). A tensor
        tied to others (embeddings and head) is set in every module that shares it. Returns the names
        of the modules whose tensors were set."""
        module = self.model.get_submodule(prefix) if prefix else self.model
        wanted = []
        for leaf, p in module.named_parameters(recurse=recurse, remove_duplicate=False):
            if p.device.type == "meta":
                wanted.append(f"{prefix}.{leaf}" if prefix else leaf)
        for leaf, _ in module.named_buffers(recurse=recurse, remove_duplicate=False):
            full = f"{prefix}.{leaf}" if prefix else leaf
            if full in self.weights.names:
                wanted.append(full)
        sources = list(dict.fromkeys(self._source(full) for full in wanted))
        fresh = [s for s in sources if s not in self._by_source]
        if fresh:
            for name, tensor in self.weights.read(fresh, self.dtype).items():
                self._by_source[name] = nn.Parameter(tensor, requires_grad=False)
                self.stats.bytes_read += tensor.numel() * tensor.element_size()
        owners = []
        for source in sources:
            for full in self._sharing[source]:
                owner_name, _, leaf = full.rpartition(".")
                owner = self.model.get_submodule(owner_name) if owner_name else self.model
                value = self._by_source[source]
                if leaf in owner._parameters:
                    if owner._parameters[leaf] is value:
                        continue
                    self._meta[full] = owner._parameters[leaf]
                    owner._parameters[leaf] = value
                else:
                    owner._buffers[leaf] = value.data
                self._live.append((owner, leaf, full))
                owners.append(owner_name)
        return list(dict.fromkeys(owners))

    def _release(self) -> None:
        """Every tensor read in this stage back to the meta device: its memory is freed (tied
        parameters get back their one meta tensor, so they stay tied)."""
        for owner, leaf, full in self._live:
            if full in self._meta:
                owner._parameters[leaf] = self._meta.pop(full)
        self._live.clear()
        self._by_source.clear()

    @contextlib.contextmanager
    def _on_demand(self, transform: Transform | None, done: dict, record: dict | None = None) -> Iterator[None]:
        """Modules outside the blocks read their own tensors when the forward first calls them (and
        are transformed then, for a transformed variant). ``record``: each module's output shapes, in
        call order (the modules the forward calls before the first block: the embeddings)."""
        block_ids = {id(b) for b in self.blocks}
        handles = []

        def hook(name):
            def read(module, _args):
                if self._standing_in(name):
                    return  # its output is replaced, so its weights are not read
                if any(p.device.type == "meta" for p in module.parameters(recurse=False)):
                    for owner in self._read(name, recurse=False):
                        if transform is not None:
                            transform.apply(owner, done)

            return read

        def keep(name):
            def after(_module, _args, out):
                record.setdefault(name, []).append((out.shape, out.dtype) if isinstance(out, torch.Tensor) else None)

            return after

        def walk(module: nn.Module, prefix: str):
            for name, child in module.named_children():
                full = f"{prefix}.{name}" if prefix else name
                if id(child) in block_ids:
                    continue
                if any(True for _ in child.parameters(recurse=False)):
                    handles.append(child.register_forward_pre_hook(hook(full)))
                    if record is not None:
                        handles.append(child.register_forward_hook(keep(full)))
                walk(child, full)

        walk(self.model, "")
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    def _standing_in(self, name: str) -> bool:
        """Whether the module ``name`` is replaced by zeros of its recorded shape now: while the logits
        are made, a module the forward calls before the blocks (the embeddings) feeds blocks that only
        replay their stored output, so its weights need no second read."""
        return self._stand_in is not None and not self._past_blocks and name in self._stand_in

    def _outside_blocks(self, transform: Transform | None) -> bool:
        """Whether ``transform`` changes any module outside the blocks (then its path needs its own inputs)."""
        if transform is None:
            return False
        for name, module in self.model.named_modules():
            if any(inside(name, p) for p in self.block_prefixes) or not any(
                True for _ in module.parameters(recurse=False)
            ):
                continue
            if transform.touches(name):
                return True
        return False

    # -- the pass ---------------------------------------------------------------------------
    def logits(
        self,
        batches: list[torch.Tensor],
        transforms: list[Transform | None],
        progress: bool = False,
        desc: str = "streaming blocks",
        limits: list[int | None] | None = None,
    ) -> Iterator[tuple[int, int, torch.Tensor]]:
        """Stream every batch of token ids through the model once per block for each variant
        (``transforms``: None is the model as stored); yields ``(variant, batch, logits)``, every batch
        of variant 0 first, then variant 1's... ``limits``: per variant, how many of the first batches
        it runs (None: all); variant 0, the float path, runs every batch any variant does."""
        limits = list(limits) if limits is not None else [None] * len(transforms)
        counts = [len(batches) if n is None else min(n, len(batches)) for n in limits]
        counts[0] = max(counts)
        batches = batches[: counts[0]]
        self.stats.passes += 1
        where = None if self.spill_dir is None else str(self.spill_dir)
        with tempfile.TemporaryDirectory(prefix="modelxray-hidden-", dir=where) as spill, torch.inference_mode():
            # each variant's states, and one variant's next states while a block runs
            budget = None if self.hidden_budget is None else self.hidden_budget // (len(transforms) + 1)
            # a variant's states: None while it is still the float path (it changed no module yet)
            states: list[HiddenStates | None] = [HiddenStates(budget, Path(spill)) for _ in transforms[:1]]
            states += [None] * (len(transforms) - 1)
            total = len(self.blocks) + 2
            with bar(total=total, desc=desc, unit="stage", enabled=progress) as pbar:
                calls = self._inputs(batches, transforms, states, budget, Path(spill))
                pbar.update(1)
                for prefix in self.block_prefixes:
                    self._block(prefix, transforms, states, calls, counts)
                    pbar.update(1)
                held = [s for s in states if s is not None]
                self.stats.hidden_bytes = max(self.stats.hidden_bytes, sum(s.in_memory + s.spilled for s in held))
                self.stats.spilled_bytes = max(self.stats.spilled_bytes, sum(s.spilled for s in held))
                # a transform that changes nothing outside the blocks leaves the head as read for the float path
                shared_head = not any(self._outside_blocks(t) for t in transforms)
                try:
                    for v, transform in enumerate(transforms):
                        hidden = states[v] if states[v] is not None else states[0]
                        for b, logits in self._head(batches[: counts[v]], transform, hidden):
                            yield v, b, logits
                        if not shared_head:
                            self._release()
                finally:
                    self._release()
                pbar.update(1)
        for transform in transforms:  # every module went by: the transform's report is whole
            if transform is not None:
                transform.complete = True

    def _inputs(self, batches, transforms, states, budget, spill) -> list[tuple[tuple, dict]]:
        """The first block's inputs for every batch, for the float path and each variant that changes
        a module before the blocks (the others share the float path's), and the other arguments the
        model passes its blocks (position embeddings, masks), the same for every variant."""
        calls: list[tuple[tuple, dict]] = []
        for v, transform in enumerate(transforms):
            if v > 0 and not self._outside_blocks(transform):
                continue
            if v > 0:
                states[v] = HiddenStates(budget, spill)
            done: dict = {}

            def keep(hidden, args, kwargs, v=v):  # each batch's states kept (or spilled) as they come
                states[v].append(hidden)
                if v == 0:
                    calls.append((args, kwargs))

            record: dict | None = {} if v == 0 else None
            try:
                with self._on_demand(transform, done, record):
                    self._catch(batches, keep)
                    if v == 0:
                        # what the evaluated batches called before the blocks (not the calibration's)
                        self._before_blocks = {name: list(calls) for name, calls in record.items()}
                        # calibration batches enter the float model's first block
                        for t in transforms:
                            if hasattr(t, "calibration_batches"):
                                caught: list = []
                                self._catch(t.calibration_batches(), lambda *c, caught=caught: caught.append(c))
                                t.start(caught)
            finally:
                self._release()
        return calls

    def _catch(self, batches, keep) -> None:
        """``keep(hidden, args, kwargs)`` with each batch's inputs to the first block (hidden states,
        other arguments), the forward stopped there."""

        def catch(_module, args, kwargs):
            keep(*block_call(args, kwargs))
            raise _Caught

        handle = self.blocks[0].register_forward_pre_hook(catch, with_kwargs=True)
        try:
            for batch in batches:
                with contextlib.suppress(_Caught):
                    forward_logits(self.model, batch)
        finally:
            handle.remove()

    def _block(self, prefix: str, transforms, states, calls, counts) -> None:
        """Read one block, run every variant's hidden states through it, then drop it. The variants
        run before the float path, so one that first changes this block starts from the float path's
        inputs to it; one that changes nothing yet still shares them (its transform still sees the
        block: a calibrating one carries its calibration inputs through it)."""
        block = self.model.get_submodule(prefix)
        self._read(prefix)
        try:
            stored = None  # the block's tensors as read, while a variant has changed them
            for v in [*range(1, len(transforms)), 0]:
                transform = transforms[v]
                changes = transform is not None and transform.touches(prefix)
                if changes and stored is None:
                    stored = {k: t.detach().clone() for k, t in block.state_dict().items()}
                try:
                    if transform is not None:
                        transform.apply(prefix, {})
                    if v == 0 or states[v] is not None or changes:
                        source = states[v] if states[v] is not None else states[0]
                        outs = HiddenStates(states[0].budget, states[0].spill_dir)
                        for i, (args, kwargs) in enumerate(calls[: counts[v]]):
                            out = block(source[i], *args, **kwargs)
                            self._tuple = isinstance(out, (tuple, list))
                            outs.append(out[0] if self._tuple else out)
                        if states[v] is None:
                            states[v] = outs  # from here on its own path
                        else:
                            states[v].replace(outs)
                finally:  # the block as read again, also when a path failed on it
                    if changes:
                        if hasattr(transform, "undo"):  # a path that swapped modules puts the block's own back
                            transform.undo(prefix)
                        block.load_state_dict(stored, strict=False)
        finally:
            self._release()

    def _head(self, batches, transform, hidden: HiddenStates) -> Iterator[tuple[int, torch.Tensor]]:
        """The model's forward once more, each block replaying the last block's stored output, so the
        model's own final norm and head make the logits."""
        current: list[torch.Tensor] = []
        as_tuple = self._tuple

        def replay(*_args, **_kwargs):
            self._past_blocks = True
            return (current[0],) if as_tuple else current[0]

        for block in self.blocks:
            block.forward = replay
        stand_in = {n: list(calls) for n, calls in self._before_blocks.items() if all(c is not None for c in calls)}
        real = {}
        for name in stand_in:
            module = self.model.get_submodule(name)
            real[name] = module

            def zeros(*args, _name=name, _module=module, **kwargs):
                if self._past_blocks or not self._stand_in.get(_name):  # called after the blocks: the real thing
                    return type(_module).forward(_module, *args, **kwargs)
                shape, dtype = self._stand_in[_name].pop(0)
                return torch.zeros(shape, dtype=dtype)

            module.forward = zeros
        self._stand_in = stand_in
        done: dict = {}
        try:
            with self._on_demand(transform, done):
                for b, batch in enumerate(batches):
                    current[:] = [hidden[b]]
                    self._past_blocks = False
                    yield b, forward_logits(self.model, batch)
        finally:
            for block in self.blocks:
                del block.forward
            for module in real.values():
                del module.forward
            self._stand_in = None
            self._past_blocks = False

    def run_transform_only(self, transform: Transform, progress: bool = False) -> None:
        """Apply ``transform`` to every module once, block by block, scoring nothing (the report of what
        it does to the weights, when no analyzer streamed the model): the blocks go by with no window
        (a calibrating transform still sees its calibration batches), then the modules outside them."""
        for _ in self.logits([], [None, transform], progress, "quantizing blocks"):
            pass
        done: dict = {}
        names = [n for n, m in self.model.named_modules() if any(True for _ in m.parameters(recurse=False))]
        with torch.inference_mode():
            for name in names:
                if not any(inside(name, p) for p in self.block_prefixes):
                    for owner in self._read(name, recurse=False):
                        transform.apply(owner, done)
            self._release()


def _element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
