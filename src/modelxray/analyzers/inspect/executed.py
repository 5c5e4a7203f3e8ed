"""What the forward on the inspected inputs says about the weights, for the advice.

- Which weights it never read: a branch the input does not take (silero-vad's 8 kHz model under a
  16 kHz input) has weights no advice should name, since nothing measured them at work. A weight
  counts as read when an op of the traced forward took its storage (this also sees the weights of
  a TorchScript file's compiled submodules, and a weight a parent uses functionally) or when the
  forward of the module that owns it ran.
- Which layers write the model's outputs: a layer whose output tensor the model returns (alone, in
  a tuple, a dict or a ``ModelOutput``) has the outputs for its units, so it is never a pruning
  candidate. Its tensor is followed through views, through functions of it alone that keep its
  size (``torch.sigmoid``, a soft cap ``30 * tanh(x / 30)``, ``.float()``) and through leaf modules
  that keep its shape (softmax, an activation, dropout); never through a function of two tensors,
  so the residual stream a transformer's layers add to is not an output of theirs. Without a
  forward too: a language model's output embedding (its lm_head, tied to the token embedding or not).

Both are watched during one forward of their own (``observe``), with forward hooks and a torch
function mode. The mode stays out of the forwards that measure: under one, ``nn.MultiheadAttention``
leaves its fast path. Which storages were read comes from the traced forward's ops.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

# returned state rather than outputs: a value projection's tensor is stored as it is in a KV cache
STATE_KEYS = frozenset({"past_key_values"})


def storage_key(t: torch.Tensor) -> int | None:
    """The tensor's storage, as the op trace keys it (shared by all its views); None without one."""
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, AttributeError, TypeError):
        return None


def _tensors(obj) -> list[torch.Tensor]:
    """The tensors of a module's output or arguments: a tensor, or inside tuples, lists and dicts."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for k, v in obj.items() if k not in STATE_KEYS for t in _tensors(v)]
    if isinstance(obj, (tuple, list)):
        return [t for v in obj for t in _tensors(v)]
    return []


def _has_units(module: nn.Module) -> bool:
    """Owns a weight of two or more dimensions: a layer with output units (Linear, convolution, LSTM)."""
    return any(p.dim() >= 2 for p in module.parameters(recurse=False))


@dataclass
class Watch:
    """What one forward showed. ``read`` stays None until ``observe`` filled it: nothing is then
    known, and no weight is left out of the advice."""

    ran: set[str] = field(default_factory=set)  # modules whose forward ran (eager ones: TorchScript runs no hooks)
    heads: set[str] = field(default_factory=set)  # layers whose output tensor the model returned
    read: set[int] | None = None  # storage keys of every tensor an op of the traced forward took
    _made: dict[int, tuple[weakref.ref, frozenset[str]]] = field(default_factory=dict, repr=False)

    def producers(self, t: torch.Tensor) -> frozenset[str]:
        """The layers whose output ``t`` is, or is a view of (an id counts only while its tensor lives)."""
        found: frozenset[str] = frozenset()
        for c in (t, getattr(t, "_base", None)):
            entry = self._made.get(id(c)) if c is not None else None
            if entry is not None and entry[0]() is c:
                found |= entry[1]
        return found

    def _mark(self, outs: list[torch.Tensor], producers: frozenset[str]) -> None:
        for t in outs if producers else []:
            with contextlib.suppress(TypeError):  # a tensor type without weak references: not followed
                self._made[id(t)] = (weakref.ref(t), producers | self.producers(t))

    def hook(self, name: str, module: nn.Module, root: bool):
        """A forward hook: records that ``name`` ran, which layers its output comes from, and, on the
        root, which layers the model's outputs come from."""
        units = _has_units(module)
        leaf = next(module.children(), None) is None

        def seen(_module, args, out) -> None:
            with torch._C.DisableTorchFunction():  # reading shapes and views here is not the model's work
                self._seen(name, units, leaf, root, args, out)

        return seen

    def _seen(self, name: str, units: bool, leaf: bool, root: bool, args, out) -> None:
        self.ran.add(name)
        outs = _tensors(out)
        if units:
            self._mark(outs, frozenset({name}))
        elif leaf:  # an elementwise leaf (softmax, activation, dropout) keeps its input's units
            ins = _tensors(args)
            if len(ins) == 1 and len(outs) == 1 and ins[0].shape == outs[0].shape:
                self._mark(outs, self.producers(ins[0]))
        if root:
            self.heads.update(p for t in outs for p in self.producers(t))

    def follow(self, ins: list[torch.Tensor], out) -> None:
        """A function of one tensor that returns one of the same size carries its units over."""
        if len(ins) == 1 and isinstance(out, torch.Tensor) and out is not ins[0] and out.numel() == ins[0].numel():
            self._mark([out], self.producers(ins[0]))


class _Follow(TorchFunctionMode):
    """Hands every torch function's tensors to ``Watch.follow``."""

    def __init__(self, watch: Watch) -> None:
        super().__init__()
        self.watch = watch

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.watch.follow(_tensors(list(args)) + _tensors(kwargs or {}), out)
        return out


@contextlib.contextmanager
def watching(model: nn.Module, watch: Watch) -> Iterator[Watch]:
    """Forward hooks on every eager module of ``model`` and functions followed, for the block,
    filling ``watch`` (``read`` is ``observe``'s to add)."""
    handles = [
        m.register_forward_hook(watch.hook(name, m, root=m is model))
        for name, m in model.named_modules()
        if not isinstance(m, torch.jit.ScriptModule)  # hooks are refused there: its storages still tell
    ]
    try:
        with _Follow(watch):
            yield watch
    finally:
        for h in handles:
            h.remove()


def observe(model: nn.Module, inputs, records, watch: Watch) -> Watch:
    """Fill ``watch``: one forward on ``inputs`` (eval mode, no grad) says which modules ran and which
    layers write the outputs; the ops of the traced forward (``measure.flops.trace_ops``) say which
    storages were read. Where that forward raises (the model itself ran in the traced one), nothing
    is known and ``watch`` stays empty."""
    from modelxray.measure.flops import eval_mode, run_model

    try:
        with eval_mode(model), torch.no_grad(), watching(model, watch):
            run_model(model, inputs)
    except Exception:  # noqa: BLE001 - a forward that refuses the hooks or the mode: nothing is known, as unrun
        watch.ran.clear()
        watch.heads.clear()
        return watch
    watch.read = {k for r in records for k, _ in r.inputs if k is not None}
    return watch


def unread_weights(model: nn.Module, watch: Watch) -> set[str]:
    """Parameters (by the name the weight statistics give them) that the forward never read and whose
    module never ran; empty when it was not traced, or for a weight whose storage cannot be told."""
    if watch.read is None:
        return set()
    out = set()
    for name, p in model.named_parameters():
        key = storage_key(p)
        if key is None or key in watch.read or name.rpartition(".")[0] in watch.ran:
            continue
        out.add(name)
    return out


def output_layers(model: nn.Module, watch: Watch) -> set[str]:
    """Layers whose units are the model's outputs: those the forward returned, and a language model's
    output embedding (found without a forward; a tied one shares the token embedding's weight)."""
    layers = set(watch.heads)
    head = _output_embedding(model)
    if head is not None:
        layers |= {n for n, m in model.named_modules() if m is head}
    return layers


def layer_weights(model: nn.Module, layers: set[str]) -> set[str]:
    """Names of the weights the ``layers`` own, as the weight statistics name them (a tied weight by
    its first name, the token embedding's)."""
    modules = dict(model.named_modules())
    ids = {id(p) for layer in layers if layer in modules for p in modules[layer].parameters(recurse=False)}
    names = {n for n, p in model.named_parameters() if id(p) in ids}
    return names | {f"{layer}.weight" if layer else "weight" for layer in layers}  # a library's dequantized weight


def _output_embedding(model: nn.Module) -> nn.Module | None:
    get = getattr(model, "get_output_embeddings", None)
    if not callable(get):
        return None
    try:
        head = get()
    except Exception:  # noqa: BLE001 - a model without one may raise (NotImplementedError, AttributeError)
        return None
    return head if isinstance(head, nn.Module) else None
