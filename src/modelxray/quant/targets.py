"""Which modules a quantizer touches, and what each is: kind, component, tower and block.

Kinds: ``linear`` (nn.Linear and GPT-2's Conv1D inside the decoder), ``conv`` (nn.Conv1d, nn.Conv2d,
nn.Conv3d: CNNs, ViT patch embeddings, ResNets; not transposed convolutions), ``embedding``,
``lm_head`` (the output projection, often tied to the input embedding).

A convolution's weight (out_channels, in_channels / groups, *kernel) is quantized as the matrix
(out_channels, in_channels / groups * prod(kernel)): a row per output channel, the input channel
outermost and the kernel positions innermost, so per-channel scales are per output channel and a
group of ``group_size`` holds contiguous elements of that flattened input (the kernel taps of one
input channel, then the next channel), with a narrower last group as for Linear.

Components follow the module names: attention (q/k/v/o projections, GPT-2's fused ``c_attn`` and
``attn.c_proj``) versus MLP (gate/up/down, GPT-2's ``c_fc`` and ``mlp.c_proj``, BERT/ViT-style
``intermediate.dense`` and ``output.dense``), ``embedding`` (nn.Embedding, and the patch embedding
convolution of a vision transformer, ``*patch_embed*``), ``lm_head``, ``projection`` (the joint-space
projections of a CLIP-style dual encoder, ``visual_projection`` / ``text_projection``, and the
projector between a generative vision-language model's towers: ``multi_modal_projector``,
``mm_projector``, ``connector``, ``language_projection``) and ``other``.

The tower is the encoder of a dual encoder or multimodal model a module belongs to: ``vision`` for
names with a segment ``vision_model``, ``vision_tower``, ``vision_encoder``, ``image_encoder`` or
``visual`` and for ``visual_projection``; ``text`` for ``text_model``, ``text_encoder``,
``text_tower``, ``language_model`` and ``text_projection``; None otherwise (every plain language
model and classifier). A module therefore matches a plan rule's ``component`` by its component or
by its tower (``Target.groups``): ``vision_model.encoder.layers.0.mlp.fc1`` is both ``mlp`` and
``vision``.

The block is the first number in the dotted name (``model.layers.3.self_attn.q_proj`` is block 3;
in a Hugging Face ResNet, ``resnet.encoder.stages.1.layers.0...`` is block 1, the stage).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn

KINDS = ("linear", "conv", "embedding", "lm_head")
TOWERS = ("vision", "text")
COMPONENTS = ("attention", "mlp", "embedding", "lm_head", "projection", "other", *TOWERS)
_ATTN = re.compile(r"(attn|attention|q_proj|k_proj|v_proj|o_proj|query|key|value)", re.IGNORECASE)
_MLP = re.compile(
    r"(mlp|ffn|feed_forward|gate_proj|up_proj|down_proj|c_fc|fc1|fc2|dense_h_to_4h|dense_4h_to_h"
    r"|intermediate\.dense|(^|\.)output\.dense)",
    re.IGNORECASE,
)
_PATCH = re.compile(r"patch_embed", re.IGNORECASE)
_PROJECTION = {"visual_projection": "vision", "text_projection": "text"}
# a generative vision-language model's projector between its towers (LLaVA, PaliGemma, Idefics3, BLIP-2)
_PROJECTORS = {"multi_modal_projector", "mm_projector", "connector", "language_projection"}
_TOWER_SEGMENTS = {
    "vision_model": "vision",
    "vision_tower": "vision",
    "vision_encoder": "vision",
    "image_encoder": "vision",
    "visual": "vision",
    "text_model": "text",
    "text_encoder": "text",
    "text_tower": "text",
    "language_model": "text",
}
_BLOCK = re.compile(r"\.(\d+)(?:\.|$)")


def _is_conv1d(module: nn.Module) -> bool:
    """GPT-2's ``Conv1D``: a Linear with its weight stored (in_features, out_features)."""
    return type(module).__name__ == "Conv1D" and hasattr(module, "nf")


def _is_conv(module: nn.Module) -> bool:
    """nn.Conv1d / nn.Conv2d / nn.Conv3d (transposed convolutions store their weight the other way)."""
    from torch import nn

    return isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d))


@dataclass
class Target:
    name: str
    module: nn.Module
    kind: str
    component: str
    block: int | None
    tower: str | None = None
    # one expert of a fused-experts tensor (transformers 5 stores a MoE layer's experts as 3-D
    # parameters, e.g. MixtralExperts.gate_up_proj (experts, out, in)): the parameter, the expert's
    # index, and whether its matrices are stored (in, out)
    param: str = "weight"
    expert: int | None = None
    transposed: bool = False

    def tensor(self) -> torch.Tensor:
        """The parameter the weight lives in (a fused-experts tensor holds every expert's)."""
        return getattr(self.module, self.param)

    def storage_key(self) -> tuple[int, int | None]:
        """What identifies the weight's storage: two targets with one key share it (tied weights)."""
        return self.tensor().data_ptr(), self.expert

    @property
    def is_linear(self) -> bool:
        """A Linear's weight (GPT-2's Conv1D and a MoE expert's matrices too)."""
        return self.kind == "linear"

    @property
    def is_conv(self) -> bool:
        return self.kind == "conv"

    @property
    def is_matrix(self) -> bool:
        """A weight quantized as a matrix in groups along its input (a Linear's or a convolution's),
        not an embedding table."""
        return self.is_linear or self.is_conv

    @property
    def groups(self) -> tuple[str, ...]:
        """The component names a plan rule's ``component`` matches: the component, then the tower."""
        return (self.component, self.tower) if self.tower else (self.component,)

    def weight_matrix(self) -> torch.Tensor:
        """The weight as (out_features, in_features): groups run along the input dimension. A
        convolution's is (out_channels, in_channels / groups * prod(kernel)), a view when it can be."""
        w = self.tensor()
        if self.expert is not None:
            return w[self.expert].t() if self.transposed else w[self.expert]
        if _is_conv1d(self.module):
            return w.t()
        if self.is_conv:
            return w.reshape(w.shape[0], math.prod(w.shape[1:]))
        return w

    def set_weight_matrix(self, value: torch.Tensor) -> None:
        import torch

        w = self.tensor()
        if self.expert is not None:
            w = w[self.expert]
            value = value.t() if self.transposed else value
        elif _is_conv1d(self.module):
            value = value.t()
        elif self.is_conv:
            value = value.reshape(w.shape)
        with torch.no_grad():
            w.copy_(value)


def component_of(name: str) -> str:
    parts = name.split(".")
    if parts[-1] in _PROJECTION or _PROJECTORS.intersection(parts):
        return "projection"
    if _PATCH.search(name):
        return "embedding"
    if _ATTN.search(name):
        return "attention"
    if _MLP.search(name):
        return "mlp"
    return "other"


def tower_of(name: str) -> str | None:
    """``vision`` / ``text`` for the modules of a dual encoder's towers (see the module doc), else None."""
    parts = name.split(".")
    if parts[-1] in _PROJECTION:
        return _PROJECTION[parts[-1]]
    return next((_TOWER_SEGMENTS[p] for p in parts if p in _TOWER_SEGMENTS), None)


def block_of(name: str) -> int | None:
    m = _BLOCK.search(name)
    return int(m.group(1)) if m else None


def find_targets(model: nn.Module) -> list[Target]:
    """Every quantizable module of ``model`` with its kind, component, block and tower, in module order.

    Modules inside a TorchScript model (``torch.jit.ScriptModule``) are never targets: they are
    ``RecursiveScriptModule``s, whose compiled code may not read their weights as an eager layer does.
    Nor is a module whose weight is computed at each forward from other tensors (a weight-norm
    parametrization, as wav2vec2's positional convolution): writing its weight would change nothing,
    so it stays as loaded and the quantizer's report says so."""
    from torch import nn
    from torch.nn.utils import parametrize

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    out = []
    for name, module in model.named_modules():
        tower = tower_of(name)
        if parametrize.is_parametrized(module, "weight"):
            continue
        if module is head and head is not None:
            out.append(Target(name, module, "lm_head", "lm_head", None, tower))
        elif isinstance(module, nn.Embedding):
            out.append(Target(name, module, "embedding", "embedding", block_of(name), tower))
        elif isinstance(module, nn.Linear) or _is_conv1d(module):
            out.append(Target(name, module, "linear", component_of(name), block_of(name), tower))
        elif _is_conv(module):
            out.append(Target(name, module, "conv", component_of(name), block_of(name), tower))
        else:
            out.extend(expert_targets(name, module, tower))
    return out


def expert_targets(name: str, module: nn.Module, tower: str | None = None) -> list[Target]:
    """One Linear target per expert of each fused-experts tensor of ``module`` (a 3-D parameter whose
    first dimension is its ``num_experts``, as transformers 5's MoE layers store them); none for any
    other module."""
    n = getattr(module, "num_experts", None)
    if not isinstance(n, int) or n < 1:
        return []
    transposed = bool(getattr(module, "is_transposed", False))
    out = []
    for pname, p in module.named_parameters(recurse=False):
        if p.dim() == 3 and p.shape[0] == n:
            block = block_of(name)
            out += [
                Target(f"{name}.{pname}.{e}", module, "linear", "mlp", block, tower, pname, e, transposed)
                for e in range(n)
            ]
    return out


def num_blocks(targets: list[Target]) -> int:
    blocks = [t.block for t in targets if t.block is not None and t.is_matrix]
    return max(blocks) + 1 if blocks else 0


def torchscript_modules(model: nn.Module) -> int:
    """How many modules of ``model`` (itself included) are TorchScript modules."""
    import torch

    return sum(isinstance(m, torch.jit.ScriptModule) for m in model.modules())


def model_label(model: nn.Module, name: str | None = None) -> str:
    """What to call ``model`` in a message: its file or config name when known, else its class."""
    return name or getattr(model, "original_name", None) or type(model).__name__


def no_match_message(what: str, model: nn.Module, targets: list[Target], name: str | None = None) -> str:
    """The one line (after ``quant: ``) of a quantizer that would quantize nothing of ``model``.

    ``what``: the quantizer and what selects modules, e.g. ``rtn int8 sym per-channel (targets linear, conv)``."""
    label = model_label(model, name)
    scripted = torchscript_modules(model)
    if scripted and not targets:
        return (
            f"{what} matches no module of {label} (a TorchScript model: its submodules are "
            "RecursiveScriptModule, and modules inside a TorchScript file cannot be quantized); use quant=none"
        )
    if not targets:
        return (
            f"{what} matches no module of {label} (it has no nn.Linear, Conv1D, nn.Conv1d/2d/3d or "
            "nn.Embedding); use quant=none"
        )
    counts: dict[str, int] = {}
    for t in targets:
        counts[t.kind] = counts.get(t.kind, 0) + 1
    has = ", ".join(f"{n} {k}" for k, n in counts.items())
    return (
        f"{what} matches no module of {label} (its quantizable modules: {has}; all left out by "
        "targets, skip or rules); set quant.targets or quant.skip, or use quant=none"
    )
