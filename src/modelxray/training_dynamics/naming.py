"""Which layer and which component family a parameter belongs to, and metric-name formatting.

Names follow the Llama family (``q_proj`` ... ``down_proj``); GPT-2's fused ``c_attn`` weight is split
into its q/k/v column blocks and ``attn.c_proj`` / ``mlp.c_fc`` / ``mlp.c_proj`` map to ``o_proj`` /
``up_proj`` / ``down_proj``, so the same metric names mean the same thing across families.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer|block)\.(\d+)\.")
_ANY_INDEX = re.compile(r"(?:^|\.)(\d+)\.")
_DIRECT = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def layer_index(name: str) -> int | None:
    """The block index in a parameter name (``model.layers.3.mlp...`` -> 3), or None outside blocks."""
    m = _LAYER.search(name) or _ANY_INDEX.search(name)
    return int(m.group(1)) if m else None


def component(name: str) -> str:
    """The component family of a parameter (``c_attn`` is handled by :func:`parts`)."""
    low = name.lower()
    for c in _DIRECT:
        if f"{c}." in low or low.endswith(c):
            return c
    if "lora_" in low:
        return "lora"
    if ".attn.c_proj" in low or "out_proj" in low:
        return "o_proj"
    if ".mlp.c_fc" in low or low.endswith("fc1.weight") or ".fc1." in low:
        return "up_proj"
    if ".mlp.c_proj" in low or ".fc2." in low:
        return "down_proj"
    if "embed" in low or low.startswith("wte") or ".wte." in low or ".wpe." in low:
        return "embeddings"
    if "norm" in low or ".ln_" in low or low.startswith("ln_"):
        return "norms"
    if "lm_head" in low:
        return "lm_head"
    return "other"


@dataclass(frozen=True)
class Part:
    """A slice of one parameter that belongs to one component (the whole tensor, or a fused block)."""

    component: str
    dim: int | None = None  # None: the whole tensor; else slice [start:stop] along ``dim``
    start: int = 0
    stop: int = 0

    def take(self, tensor):
        return tensor if self.dim is None else tensor.narrow(self.dim, self.start, self.stop - self.start)


def parts(name: str, shape: tuple[int, ...]) -> list[Part]:
    """GPT-2's ``attn.c_attn`` (Conv1D, weight ``(d, 3d)``, bias ``(3d,)``) is q, k and v side by side
    along its last dimension; every other parameter is one part."""
    if ".c_attn." in f"{name}." and shape and shape[-1] % 3 == 0:
        dim = len(shape) - 1
        third = shape[-1] // 3
        return [Part(c, dim, i * third, (i + 1) * third) for i, c in enumerate(("q_proj", "k_proj", "v_proj"))]
    return [Part(component(name))]


def fmt_threshold(t: float) -> str:
    """``1e-06`` for powers of ten (the documented metric names), ``%g`` otherwise (``0.5``, ``2.5e-07``)."""
    if t == 0:
        return "0"
    if t > 0 and math.isclose(10 ** round(math.log10(t)), t, rel_tol=1e-9):
        return f"{t:.0e}"
    return f"{t:g}"


def fmt_fraction(f: float) -> str:
    """``keep_1pct`` style label of a kept fraction (0.01 -> ``1pct``, 0.005 -> ``0.5pct``)."""
    return f"{f * 100:g}pct"
