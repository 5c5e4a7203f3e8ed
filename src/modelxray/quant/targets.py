"""Which modules a quantizer touches, and what each is: kind, component and block.

Kinds: ``linear`` (nn.Linear and GPT-2's Conv1D inside the decoder), ``embedding``, ``lm_head``
(the output projection, often tied to the input embedding). Components follow the module names:
attention (q/k/v/o projections, GPT-2's fused ``c_attn`` and ``attn.c_proj``) versus MLP (gate/up/
down, GPT-2's ``c_fc`` and ``mlp.c_proj``). The block is the first number in the dotted name
(``model.layers.3.self_attn.q_proj`` is block 3).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn

KINDS = ("linear", "embedding", "lm_head")
COMPONENTS = ("attention", "mlp", "embedding", "lm_head", "other")
_ATTN = re.compile(r"(attn|attention|q_proj|k_proj|v_proj|o_proj|query|key|value)", re.IGNORECASE)
_MLP = re.compile(
    r"(mlp|ffn|feed_forward|gate_proj|up_proj|down_proj|c_fc|fc1|fc2|dense_h_to_4h|dense_4h_to_h)", re.IGNORECASE
)
_BLOCK = re.compile(r"\.(\d+)(?:\.|$)")


def _is_conv1d(module: nn.Module) -> bool:
    return type(module).__name__ == "Conv1D" and hasattr(module, "nf")


@dataclass
class Target:
    name: str
    module: nn.Module
    kind: str
    component: str
    block: int | None

    def weight_matrix(self) -> torch.Tensor:
        """The weight as (out_features, in_features): groups run along the input dimension."""
        w = self.module.weight
        return w.t() if _is_conv1d(self.module) else w

    def set_weight_matrix(self, value: torch.Tensor) -> None:
        import torch

        with torch.no_grad():
            self.module.weight.copy_(value.t() if _is_conv1d(self.module) else value)


def component_of(name: str) -> str:
    if _ATTN.search(name):
        return "attention"
    if _MLP.search(name):
        return "mlp"
    return "other"


def block_of(name: str) -> int | None:
    m = _BLOCK.search(name)
    return int(m.group(1)) if m else None


def find_targets(model: nn.Module) -> list[Target]:
    """Every quantizable module of ``model`` with its kind, component and block, in module order."""
    from torch import nn

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    out = []
    for name, module in model.named_modules():
        if module is head and head is not None:
            out.append(Target(name, module, "lm_head", "lm_head", None))
        elif isinstance(module, nn.Embedding):
            out.append(Target(name, module, "embedding", "embedding", block_of(name)))
        elif isinstance(module, nn.Linear) or _is_conv1d(module):
            out.append(Target(name, module, "linear", component_of(name), block_of(name)))
    return out


def num_blocks(targets: list[Target]) -> int:
    blocks = [t.block for t in targets if t.block is not None and t.kind == "linear"]
    return max(blocks) + 1 if blocks else 0
