"""What a convolutional or ViT model's own layers say about the one image it takes: channels from the
first convolution, the size from a ViT's position embedding and patch convolution, or, where the
weights say nothing of the size (a traced or scripted file), from the sizes its own forward runs on.
Read by the inspect analyzer's input inference and by the file loader's kind detection."""

from __future__ import annotations

import math
import re

import torch
from torch import nn

from modelxray.models.architecture import _CONV, type_name

_POS = re.compile(r"(^|[._])pos", re.IGNORECASE)  # pos_embed, embeddings.position_embedding(s)


def probed_image_shape(model: nn.Module) -> tuple[tuple[int, int, int], str] | None:
    """One image's (C, H, W) for a model whose first layer is a 2-D convolution, from its own forward
    (``probe_image_size``), with how it was found; None when it is no such model or no single size runs."""
    first = first_layer(model)
    if first is None or type_name(first) not in _CONV or conv_dims(first) != 2:
        return None
    c = in_channels(first)
    size, why = probe_image_size(model, c)
    return ((c, size, size), why) if size is not None else None


# square image sizes tried, most common first: a traced or scripted file records no input size, but
# its forward runs only on the sizes its flatten and linear layers fit
PROBE_SIZES = (224, 32, 28, 64, 96, 128, 256, 299, 384, 8, 16, 48, 112, 160, 192, 227, 240, 320, 512)


def probe_image_size(model: nn.Module, channels: int) -> tuple[int | None, str]:
    """The image size a convolutional model's own forward accepts, from one batch-of-one forward per
    candidate (``PROBE_SIZES``): ``(size, why)`` when exactly one runs; ``(None, what was found)``
    when none does, or when two do (it pools: any size runs, and which one to analyse is the user's)."""
    runs = []
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    with torch.inference_mode():
        for size in PROBE_SIZES:
            try:
                model(torch.zeros(1, channels, size, size, device=device, dtype=dtype))
            except Exception:  # noqa: BLE001 - a size the model's layers do not fit
                continue
            runs.append(size)
            if len(runs) == 2:
                return None, f"its forward runs on several image sizes ({runs[0]} and {runs[1]} at least)"
    if not runs:
        return None, "its forward runs on none of the common square image sizes"
    return runs[0], f"the only common image size its forward runs on: {channels}x{runs[0]}x{runs[0]}"


def first_layer(model: nn.Module) -> nn.Module | None:
    return next((m for m in model.modules() if type_name(m) in _CONV | {"Linear"}), None)


def conv_dims(conv: nn.Module) -> int | None:
    w = getattr(conv, "weight", None)
    return w.dim() - 2 if isinstance(w, torch.Tensor) and w.dim() >= 3 else None


def in_channels(conv: nn.Module) -> int:
    c = getattr(conv, "in_channels", None)
    if isinstance(c, int):
        return c
    if "Transpose" in type_name(conv):  # weight (in, out / groups, *kernel)
        return int(conv.weight.shape[0])
    return int(conv.weight.shape[1]) * int(getattr(conv, "groups", 1) or 1)  # weight (out, in / groups, *kernel)


def conv_stride(conv: nn.Module) -> tuple[int, ...] | None:
    """A convolution's stride: its attribute, or (a traced module keeps none) the constant in its graph."""
    stride = getattr(conv, "stride", None)
    if stride is not None:
        return tuple(int(s) for s in stride)
    try:
        for node in conv.graph.nodes():
            if node.kind() in ("aten::_convolution", "aten::conv2d", "aten::convolution"):
                value = node.inputsAt(3)
                got = value.toIValue()
                if got is None and value.node().kind() == "prim::ListConstruct":
                    got = [v.toIValue() for v in value.node().inputs()]
                if got is not None and all(isinstance(s, int) for s in got):
                    return tuple(got)
    except (AttributeError, RuntimeError):
        pass
    return None


def vit_image_shape(model: nn.Module) -> tuple[list[int], str] | None:
    """(C, H, W) of a ViT: a position-embedding tensor (1, extra + n*n, D) or (extra + n*n, D) whose
    width D is the out_channels of a 2-D patch convolution (kernel k, stride s): H = W = (n-1)*s + k,
    C = the convolution's in_channels. ``extra`` (class/distillation tokens) is tried as 1, 0, 2."""
    convs = [(n, m) for n, m in model.named_modules() if type_name(m) == "Conv2d" and conv_dims(m) == 2]
    if not convs:
        return None
    candidates = []
    for name, p in model.named_parameters():
        if not _POS.search(name):
            continue
        if p.dim() == 3 and p.shape[0] == 1:
            candidates.append((0, name, int(p.shape[1]), int(p.shape[2])))
        elif p.dim() == 2:
            candidates.append((1, name, int(p.shape[0]), int(p.shape[1])))
    for _, pname, tokens, width in sorted(candidates, key=lambda c: c[0]):
        matching = [(n, m) for n, m in convs if int(m.weight.shape[0]) == width]
        if not matching:
            continue
        cname, conv = next(((n, m) for n, m in matching if "patch" in n.lower()), matching[0])
        kh, kw = (int(k) for k in conv.weight.shape[2:])
        stride = conv_stride(conv)
        assumed = stride is None
        sh, sw = stride if stride is not None else (kh, kw)
        for extra in (1, 0, 2):
            n = math.isqrt(max(tokens - extra, 0))
            if n > 0 and n * n == tokens - extra:
                h, w = (n - 1) * sh + kh, (n - 1) * sw + kw
                c = in_channels(conv)
                why = (
                    f"position embedding {pname} of {tokens} tokens = {extra} + {n}x{n} patches, patch "
                    f"convolution {cname} with kernel {kh}x{kw}, stride {sh}x{sw}"
                    + (" (assumed = kernel)" if assumed else "")
                    + f", {c} input channels"
                )
                return [c, h, w], why
    return None
