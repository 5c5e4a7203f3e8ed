"""Round-to-nearest (RTN) weight quantization, simulated ("fake"): quantize, then dequantize.

Simulation is the engine of the accuracy studies: any bit width 2..16 runs on any hardware, and
the error is exactly what a real low-bit kernel with the same format would see. Sizes are
reported as the packed format would store them (``packed_bits``), never as float32 storage.

Formats, for a weight matrix ``W`` (out_features x in_features) cut into groups along the input
dimension (per tensor: one group; per channel: one group per output row; group: ``group_size``
columns per group, the last group narrower when ``group_size`` does not divide in_features, e.g.
576 = 4 x 128 + 64):

* symmetric: ``scale = max|w| / (2^(b-1) - 1)``, ``q = round(w / scale)`` in ``[-(2^(b-1)-1), 2^(b-1)-1]``;
  stores ``b`` bits per weight plus one scale per group.
* asymmetric: ``scale = (max w - min w) / (2^b - 1)``, ``q = round((w - min w) / scale)`` in
  ``[0, 2^b - 1]``, dequantized as ``q * scale + min`` (a float offset, as GGUF's Q4_1 stores it);
  stores ``b`` bits per weight plus a scale and an offset per group.

Scales and offsets are rounded to ``scale_dtype`` (float16 by default, as real formats store
them) before use. Every element's error is at most half a quantization step.

The formats (``QuantSpec``) and size arithmetic are plain Python, so configs validate without torch;
the kernels import torch when they run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

GRANULARITIES = ("tensor", "channel", "group")
SCALE_BITS = {"float16": 16, "bfloat16": 16, "float32": 32}  # scale_dtype -> bits per stored scale


@dataclass(frozen=True)
class QuantSpec:
    bits: int = 4
    symmetric: bool = True
    granularity: str = "group"
    group_size: int = 128
    scale_dtype: str = "float16"

    def describe(self) -> str:
        g = {"tensor": "per-tensor", "channel": "per-channel"}.get(self.granularity, f"g{self.group_size}")
        return f"int{self.bits} {'sym' if self.symmetric else 'asym'} {g}"


def group_bounds(cols: int, spec: QuantSpec) -> list[tuple[int, int]]:
    """Column ranges of the groups of one row (a narrower last group when group_size does not divide)."""
    if spec.granularity in ("tensor", "channel") or spec.group_size >= cols:
        return [(0, cols)]
    return [(s, min(s + spec.group_size, cols)) for s in range(0, cols, spec.group_size)]


def _group_view(w: torch.Tensor, spec: QuantSpec) -> list[torch.Tensor]:
    """Views of ``w`` (rows x cols) as (rows, n_groups, width) blocks: full groups, then the remainder."""
    rows, cols = w.shape
    if spec.granularity == "tensor":
        return [w.reshape(1, 1, -1)]
    if spec.granularity == "channel" or spec.group_size >= cols:
        return [w.reshape(rows, 1, cols)]
    g = spec.group_size
    full = cols // g * g
    parts = [w[:, :full].reshape(rows, cols // g, g)]
    if full < cols:
        parts.append(w[:, full:].reshape(rows, 1, cols - full))
    return parts


def group_params(
    x: torch.Tensor, spec: QuantSpec, clip: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale and offset of each group, reducing over the last dimension (keepdim). Offsets are 0 when
    symmetric. ``clip`` (broadcastable to the result) shrinks each group's range (clipping searches)."""
    import torch

    sdt = getattr(torch, spec.scale_dtype)
    if spec.symmetric:
        amax = x.abs().amax(dim=-1, keepdim=True)
        scale = ((amax if clip is None else amax * clip) / (2 ** (spec.bits - 1) - 1)).to(sdt).float()
        return torch.where(scale > 0, scale, torch.ones_like(scale)), torch.zeros_like(scale)
    lo, hi = x.amin(dim=-1, keepdim=True), x.amax(dim=-1, keepdim=True)
    if clip is not None:
        lo, hi = lo * clip, hi * clip
    lo = lo.to(sdt).float()
    scale = ((hi - lo) / (2**spec.bits - 1)).to(sdt).float()
    return torch.where(scale > 0, scale, torch.ones_like(scale)), lo


def quantize_with(x: torch.Tensor, scale: torch.Tensor, lo: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """Round ``x`` to the grid of ``scale`` (and offset ``lo``) and dequantize."""
    import torch

    if spec.symmetric:
        qmax = 2 ** (spec.bits - 1) - 1
        return torch.clamp(torch.round(x / scale), -qmax, qmax) * scale
    return torch.clamp(torch.round((x - lo) / scale), 0, 2**spec.bits - 1) * scale + lo


def _quantize_blocks(x: torch.Tensor, spec: QuantSpec, clip: torch.Tensor | None = None) -> torch.Tensor:
    """Fake-quantize (R, G, W) blocks, one scale (and offset) per (R, G) group."""
    scale, lo = group_params(x, spec, clip)
    return quantize_with(x, scale, lo, spec)


def fake_quantize(w: torch.Tensor, spec: QuantSpec, clip: torch.Tensor | None = None) -> torch.Tensor:
    """Quantize-dequantize a 2-D weight (groups along dim 1); returns a new tensor of ``w``'s dtype.

    ``clip`` (rows x groups, or 1 x 1 per tensor) optionally shrinks each group's range."""
    import torch

    if w.dim() != 2:
        raise ValueError(f"expected a 2-D weight, got shape {tuple(w.shape)}")
    x = w.detach().float()
    out = torch.empty_like(x)
    rows, cols = x.shape
    if spec.granularity == "tensor":
        c = None if clip is None else clip.reshape(1, 1, 1)
        return _quantize_blocks(x.reshape(1, 1, -1), spec, c).reshape(rows, cols).to(w.dtype)
    col, g = 0, 0
    for block in _group_view(x, spec):
        width = block.shape[1] * block.shape[2]
        c = None if clip is None else clip[:, g : g + block.shape[1]].unsqueeze(-1)
        out[:, col : col + width] = _quantize_blocks(block, spec, c).reshape(rows, width)
        col += width
        g += block.shape[1]
    return out.to(w.dtype)


def n_groups(shape: tuple[int, int], spec: QuantSpec) -> int:
    rows, cols = shape
    if spec.granularity == "tensor":
        return 1
    if spec.granularity == "channel":
        return rows
    return rows * -(-cols // spec.group_size)


def packed_bits(shape: tuple[int, int], spec: QuantSpec) -> int:
    """Bits the packed format stores: ``bits`` per weight plus per-group scale (and offset)."""
    per_group = SCALE_BITS[spec.scale_dtype] * (1 if spec.symmetric else 2)
    return shape[0] * shape[1] * spec.bits + n_groups(shape, spec) * per_group


def relative_error(original: torch.Tensor, quantized: torch.Tensor) -> float:
    """||W - Q(W)||_F / ||W||_F (0 for an all-zero weight)."""
    import torch

    original, quantized = original.detach().float(), quantized.detach().float()
    num = torch.linalg.vector_norm(original - quantized)
    den = torch.linalg.vector_norm(original)
    return float(num / den) if den > 0 else 0.0
