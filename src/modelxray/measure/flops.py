"""FLOPs per module and per aten op, and bytes moved per op, with attention counted for every implementation.

``torch.utils.flop_counter.FlopCounterMode`` counts an op only if its overload packet has a formula in
its registry. Its registry has formulas for the CUDA SDPA kernels (``_scaled_dot_product_flash_attention``,
``..._efficient_attention``, ``..._cudnn_attention``) but none for the CPU kernel
``aten._scaled_dot_product_flash_attention_for_cpu`` that ``F.scaled_dot_product_attention`` dispatches
to on CPU (with or without a mask), and none for the MPS/XPU variants. Those kernels are not composite, so
the mode cannot decompose them into ``bmm`` either: their FLOPs are silently dropped (6.2% of SmolLM2-135M
at 256 tokens). ``EXTRA_FLOP_FORMULAS`` fills the gap and is passed as ``custom_mapping``, so torch's
global registry stays untouched. Attention is counted in full (no causal discount), as torch does for
eager ``bmm`` and the CUDA kernels, so eager and SDPA give the same total.

FLOPs follow torch's convention: 2*M*K*N per matmul; ``addmm``'s bias add is not counted.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from math import prod
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import (
    FlopCounterMode,
    sdpa_backward_flop_count,
    sdpa_flop_count,
)
from torch.utils.module_tracker import ModuleTracker

aten = torch.ops.aten


# -- formulas torch lacks (shape-level: they receive shapes, like torch's own) --------------------------
def _sdpa_forward(query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query, key, value)


def _sdpa_backward(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out, query, key, value)


def _mm_like(self_shape, a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """``addmm``-shaped ops (bias, a, b): 2*M*K*N, bias add not counted (as torch's ``addmm``)."""
    return 2 * a_shape[0] * a_shape[1] * b_shape[1]


def _int_mm(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    return 2 * a_shape[0] * a_shape[1] * b_shape[1]


def _mv(a_shape, v_shape, *args, out_shape=None, **kwargs) -> int:
    return 2 * a_shape[0] * a_shape[1]


def _addmv(self_shape, a_shape, v_shape, *args, out_shape=None, **kwargs) -> int:
    return 2 * a_shape[0] * a_shape[1]


def _dot(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    return 2 * a_shape[0]


def _extra_formulas() -> dict[Any, Callable[..., int]]:
    names = {
        "_scaled_dot_product_flash_attention_for_cpu": _sdpa_forward,
        "_scaled_dot_product_flash_attention_for_cpu_backward": _sdpa_backward,
        "_scaled_dot_product_attention_math_for_mps": _sdpa_forward,
        "_scaled_dot_product_fused_attention_overrideable": _sdpa_forward,
        "_scaled_dot_product_fused_attention_overrideable_backward": _sdpa_backward,
        "_addmm_activation": _mm_like,
        "_int_mm": _int_mm,
        "mv": _mv,
        "addmv": _addmv,
        "dot": _dot,
        "vdot": _dot,
    }
    out = {}
    for name, formula in names.items():
        try:
            out[getattr(aten, name)] = formula
        except (AttributeError, RuntimeError):  # an older/newer torch without this op
            continue
    return out


EXTRA_FLOP_FORMULAS: dict[Any, Callable[..., int]] = _extra_formulas()


def flop_counter(depth: int | None = None) -> FlopCounterMode:
    """A silent ``FlopCounterMode`` with torch's formulas plus ``EXTRA_FLOP_FORMULAS``."""
    return FlopCounterMode(depth=depth, display=False, custom_mapping=EXTRA_FLOP_FORMULAS)


# -- running a model -----------------------------------------------------------------------------------
@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """``model.eval()`` with no parameter requiring grad for the block, then every module's training
    flag and every parameter's ``requires_grad`` back. (A view of a parameter made under no_grad,
    BLIP-2's ``query_tokens.expand``, still requires grad without a grad_fn, which torch's module
    tracker, under the FLOP counter and the op trace, cannot hook.)"""
    flags = [(m, m.training) for m in model.modules()]
    grads = [(p, p.requires_grad) for p in model.parameters()]
    model.eval()
    for p, _ in grads:
        p.requires_grad_(False)
    try:
        yield model
    finally:
        for m, training in flags:
            m.training = training
        for p, wanted in grads:
            p.requires_grad_(wanted)


def run_model(model: nn.Module, inputs) -> Any:
    """One forward: a dict is passed as kwargs; integer tensors of a HF model as ``input_ids`` (no KV cache)."""
    from modelxray.measure.scoring import is_hf_model

    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, torch.Tensor) and not inputs.is_floating_point() and is_hf_model(model):
        return model(input_ids=inputs, use_cache=False)
    return model(inputs)


# -- FLOPs ----------------------------------------------------------------------------------------------
@dataclass
class FlopReport:
    total: int
    by_op: dict[str, int]
    by_module: dict[str, int]
    by_module_op: dict[str, dict[str, int]] = field(default_factory=dict)


def count_flops(model: nn.Module, inputs, *, depth: int | None = None) -> FlopReport:
    """FLOPs of one forward (eval mode, no grad). ``by_module`` is inclusive and keyed as FlopCounterMode
    names modules ("Global", "GPT2LMHeadModel.transformer.h.0.attn"); ``depth`` keeps names with at most
    ``depth`` dotted parts (torch's table convention: "h.0" counts as two), ``None`` keeps all."""
    counter = flop_counter(depth)
    with eval_mode(model), torch.no_grad(), counter:
        run_model(model, inputs)
    by_module_op = {}
    for mod, ops in counter.get_flop_counts().items():
        if depth is not None and mod != "Global" and mod.count(".") + 1 > depth:
            continue
        by_module_op[mod] = {str(op): int(n) for op, n in ops.items()}
    by_op = dict(by_module_op.get("Global", {}))
    return FlopReport(
        total=int(counter.get_total_flops()),
        by_op=by_op,
        by_module={m: sum(ops.values()) for m, ops in by_module_op.items()},
        by_module_op=by_module_op,
    )


def closed_form_gpt2_flops(n_layer: int, d_model: int, seq_len: int, vocab: int, batch: int = 1) -> int:
    """Forward FLOPs of GPT-2 (4x MLP): 2N*T for the weights (N = 12*L*d^2), 4*L*T^2*d for QK^T and AV
    (no causal discount), 2*d*V*T for the LM head; times the batch."""
    n = 12 * n_layer * d_model**2
    t = seq_len
    return batch * (2 * n * t + 4 * n_layer * t * t * d_model + 2 * d_model * vocab * t)


# -- bytes moved per op ---------------------------------------------------------------------------------
def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements a tensor addresses: broadcast (stride 0) dims count once."""
    try:
        n = prod(s for s, st in zip(t.shape, t.stride()) if st != 0) if t.numel() else 0
    except (RuntimeError, NotImplementedError):  # sparse and other layouts without strides
        n = t.numel()
    return int(n) * t.element_size()


def _storage_key(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage()._cdata  # the StorageImpl: shared by every view of the tensor
    except (RuntimeError, NotImplementedError, AttributeError):
        return None


def _tensors(tree) -> list[torch.Tensor]:
    return [x for x in tree_flatten(tree)[0] if isinstance(x, torch.Tensor)]


_MATMULS = {
    "aten.mm",
    "aten.addmm",
    "aten.bmm",
    "aten.baddbmm",
    "aten.linear",
    "aten.matmul",
    "aten._addmm_activation",
    "aten.mv",
    "aten.addmv",
    "aten.convolution",
    "aten._convolution",
    "aten._int_mm",
}
_GATHERS = {"aten.embedding", "aten.index_select", "aten.gather", "aten.index"}
_ELEMENTWISE_EXTRA = {"aten._to_copy", "aten.dropout", "aten.native_dropout"}


@dataclass
class _Record:
    op: str
    flops: int
    bytes_read: int
    bytes_written: int
    module: str
    is_view: bool
    elementwise: bool
    inputs: list[tuple[int | None, int]]  # (storage key, bytes) per input tensor
    outputs: list[tuple[int | None, int]]
    shapes: str = ""  # the input tensors' shapes, as the profiler writes them ("1x4x28x28 4x1x3x3 4")


class _OpRecorder(TorchDispatchMode):
    """Records every aten op in execution order; decomposes exactly as FlopCounterMode does, so the ops
    and their FLOPs match ``count_flops``."""

    def __init__(self, registry: dict, tracker: ModuleTracker) -> None:
        super().__init__()
        self.registry = registry
        self.tracker = tracker
        self.records: list[_Record] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func._overloadpacket
        if packet not in self.registry and func is not torch.ops.prim.device.default:
            with self:
                r = func.decompose(*args, **kwargs)
                if r is not NotImplemented:
                    return r
        out = func(*args, **kwargs)
        self._record(func, packet, args, kwargs, out)
        return out

    def _record(self, func, packet, args, kwargs, out) -> None:
        ins = [(_storage_key(t), tensor_bytes(t)) for t in _tensors((args, kwargs))]
        outs = [(_storage_key(t), tensor_bytes(t)) for t in _tensors(out)]
        # a view returns its input's storage without writing it; ``_unsafe_view`` does so without saying
        # so in its schema, hence the storage check (in-place ops say ``is_write`` and are not views)
        writes = any(r.alias_info is not None and r.alias_info.is_write for r in func._schema.returns)
        in_keys = {k for k, _ in ins if k is not None}
        is_view = bool(outs) and not writes and all(k is not None and k in in_keys for k, _ in outs)
        flops = 0
        if packet in self.registry:
            flops = int(self.registry[packet](*args, **kwargs, out_val=out))
        parents = self.tracker.parents - {"Global"}
        module = max(parents, key=lambda p: p.count(".")) if parents else ""
        name = str(packet)
        read = sum(b for _, b in ins)
        if name in _GATHERS and ins:  # reads the gathered rows, not the whole table
            read = sum(b for _, b in ins[1:]) + sum(b for _, b in outs)
        self.records.append(
            _Record(
                op=name,
                flops=flops,
                module=module,
                is_view=is_view,
                bytes_read=0 if is_view else read,
                bytes_written=0 if is_view else sum(b for _, b in outs),
                elementwise=(torch.Tag.pointwise in func.tags or name in _ELEMENTWISE_EXTRA) and not flops,
                inputs=ins,
                outputs=outs,
                shapes=" ".join("x".join(map(str, t.shape)) for t in _tensors((args, kwargs)) if t.dim()),
            )
        )


def trace_ops(model: nn.Module, inputs) -> list[_Record]:
    """Every aten op of one forward (eval mode, no grad) in execution order, with FLOPs, bytes and module."""
    registry = flop_counter().flop_registry
    tracker = ModuleTracker()
    recorder = _OpRecorder(registry, tracker)
    with eval_mode(model), torch.no_grad(), tracker, recorder:
        run_model(model, inputs)
    return recorder.records


@dataclass
class OpTraffic:
    op: str
    calls: int
    flops: int
    bytes_read: int
    bytes_written: int

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved, if every input is read and every output written once (no cache reuse)."""
        moved = self.bytes_read + self.bytes_written
        return self.flops / moved if moved else 0.0


def op_traffic(model: nn.Module, inputs, records: list[_Record] | None = None) -> list[OpTraffic]:
    """Per aten op type: calls, FLOPs and bytes read/written in one forward, most FLOPs (then bytes) first.
    Bytes read are the input tensors' sizes (gathers such as ``embedding``: the rows they fetch), bytes
    written the outputs'; views move 0 bytes."""
    agg: dict[str, OpTraffic] = {}
    for r in records if records is not None else trace_ops(model, inputs):
        t = agg.setdefault(r.op, OpTraffic(r.op, 0, 0, 0, 0))
        t.calls += 1
        t.flops += r.flops
        t.bytes_read += r.bytes_read
        t.bytes_written += r.bytes_written
    return sorted(agg.values(), key=lambda t: (-t.flops, -(t.bytes_read + t.bytes_written), t.op))


# -- fusion candidates ----------------------------------------------------------------------------------
def layer_pattern(module: str) -> str:
    """ "m.layers.3.mlp.c_fc" -> "m.layers.*.mlp.c_fc": the same site in every layer aggregates. A trailing
    index ("features.3", a Sequential's own layer) stays: it names one layer, not a repeated block."""
    return re.sub(r"(?<=\.)\d+(?=\.)", "*", module)


def _chains(records: list[_Record]) -> Iterator[tuple[_Record, list[_Record]]]:
    """A matmul followed (views aside) by elementwise ops each reading a tensor made inside the chain."""
    i, ops = 0, [r for r in records if not r.is_view]
    while i < len(ops):
        head = ops[i]
        i += 1
        if head.op not in _MATMULS:
            continue
        made = {k for k, _ in head.outputs if k is not None}
        consumers: list[_Record] = []
        while i < len(ops) and ops[i].elementwise and any(k in made for k, _ in ops[i].inputs):
            consumers.append(ops[i])
            made |= {k for k, _ in ops[i].outputs if k is not None}
            i += 1
        if consumers:
            yield head, consumers


def _bytes_saved(head: _Record, consumers: list[_Record]) -> int:
    """Intermediate outputs a fused kernel would not write, plus the chain's reads of them."""
    chain = [head, *consumers]
    made: set[int] = set()
    saved = 0
    for r in chain[:-1]:
        saved += sum(b for _, b in r.outputs)
    for r in chain:
        saved += sum(b for k, b in r.inputs if k is not None and k in made)
        made |= {k for k, _ in r.outputs if k is not None}
    return saved


def fusion_candidates(model: nn.Module, inputs, records: list[_Record] | None = None) -> list[dict]:
    """Matmul -> elementwise chains of one forward, aggregated over identical patterns at the same producer
    module (layer indices become "*"), largest ``bytes_saved_estimate`` (bytes per forward, all occurrences)
    first."""
    agg: dict[tuple, dict] = {}
    for head, consumers in _chains(records if records is not None else trace_ops(model, inputs)):
        module = layer_pattern(head.module)
        key = (head.op, tuple(c.op for c in consumers), module)
        row = agg.setdefault(
            key,
            {"producer": head.op, "consumers": list(key[1]), "module": module, "count": 0, "bytes_saved_estimate": 0},
        )
        row["count"] += 1
        row["bytes_saved_estimate"] += _bytes_saved(head, consumers)
    return sorted(agg.values(), key=lambda r: (-r["bytes_saved_estimate"], r["producer"], r["module"]))
