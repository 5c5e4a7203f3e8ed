"""What kind of model this is, from its modules (or tensor names alone); the input it takes is
``models/input_inference.py``.

The classification is a rule over module types and names, documented so users can predict it:
attention modules plus a token embedding make a transformer (decoder-only when the model has a
causal-LM head or its config says ``is_decoder``; encoder-decoder when the config says so; encoder
otherwise); convolutions without attention make a CNN; only linear layers make an MLP; recurrent
layers an RNN; attention whose only convolution cuts the image into patches a vision transformer;
an image tower beside a text tower a dual encoder; selective state-space layers (Mamba's ``A_log``)
a state-space model, not a CNN for its depthwise convolution; other convolutions, recurrence or
state-space layers mixed with attention a hybrid."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch import nn

from modelxray.core.formatting import type_name

_ATTN_NAME = re.compile(r"(attn|attention|self_attn|q_proj|query)", re.IGNORECASE)
_CONV = {"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"}
_RNN = {"RNN", "LSTM", "GRU"}
_LINEAR = {"Linear", "Conv1D", "NonDynamicallyQuantizableLinear"}


@dataclass
class Architecture:
    kind: str  # decoder-only transformer | encoder-decoder transformer | encoder transformer | vision transformer | dual encoder (vision + text) | state-space model | CNN | MLP | RNN | hybrid | unknown
    reason: str  # the rule that fired, in words
    module_counts: dict[str, int]  # leaf module type -> count
    param_share: dict[str, float]  # owning module type -> share of all parameters
    total_parameters: int
    input: dict = field(default_factory=dict)  # what the compute analysis feeds it (models/input_inference.py)


def module_counts(model: nn.Module) -> dict[str, int]:
    """Leaf modules (no children) by type name, plus attention blocks (which are not leaves)."""
    counts = Counter(type_name(m) for m in model.modules() if not list(m.children()))
    attn = sum(1 for n, m in model.named_modules() if n and "attention" in type_name(m).lower())
    if attn:
        counts["(attention blocks)"] = attn
    return dict(counts.most_common())


def param_share(model: nn.Module) -> tuple[dict[str, float], int]:
    """Share of parameters held by each module type (a parameter belongs to the module that owns it;
    tied weights count once)."""
    seen, by_type = set(), Counter()
    for m in model.modules():
        for p in m.parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            by_type[type_name(m)] += p.numel()
    total = sum(by_type.values())
    return ({k: v / total for k, v in by_type.most_common()} if total else {}), total


def classify(model: nn.Module) -> tuple[str, str]:
    mods = [(n, m, type_name(m)) for n, m in model.named_modules()]
    has_attn = any(_ATTN_NAME.search(n.rsplit(".", 1)[-1]) or "attention" in t.lower() for n, m, t in mods if n)
    has_emb = any(t == "Embedding" for _, _, t in mods)
    has_conv = any(t in _CONV for _, _, t in mods)
    has_rnn = any(t in _RNN for _, _, t in mods)
    has_linear = any(t in _LINEAR for _, _, t in mods)
    config = getattr(model, "config", None)
    names = {n.rsplit(".", 1)[-1] for n, _, _ in mods}
    if {"vision_model", "text_model"} <= names:
        return "dual encoder (vision + text)", "an image tower and a text tower (vision_model, text_model)"
    convs = [(n, m) for n, m, t in mods if t in _CONV]
    if has_attn and convs and not has_rnn and all(_is_patch_embedding(n, m) for n, m in convs):
        return "vision transformer", "attention over image patches (a patch-embedding convolution)"
    ssm = any(isinstance(getattr(m, "A_log", None), torch.Tensor) for _, m, _ in mods)  # Mamba's decay parameters
    if has_attn and ssm:
        return "hybrid", "attention together with state-space layers (A_log: Mamba's selective scan)"
    if ssm:
        lm = next((t for _, _, t in mods if "CausalLM" in t or "LMHead" in t), None)
        what = f", a causal-LM head ({lm})" if lm else ""
        return (
            "state-space model",
            f"selective state-space layers (A_log) with a causal depthwise convolution{what}, no attention",
        )
    if has_attn and (has_conv or has_rnn):
        return "hybrid", "attention together with " + ("convolutions" if has_conv else "recurrent layers")
    if has_attn:
        if getattr(config, "is_encoder_decoder", False):
            return "encoder-decoder transformer", "attention; config.is_encoder_decoder"
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        lm = next((t for _, _, t in mods if "CausalLM" in t or "LMHead" in t), None)
        name = lm or type_name(model)
        if (
            getattr(config, "is_decoder", False)
            or lm is not None
            or (head is not None and has_emb and getattr(config, "model_type", "") in _DECODER_TYPES)
        ):
            return "decoder-only transformer", f"attention, token embedding and a causal-LM head ({name})"
        return "encoder transformer", "attention without a causal-LM head"
    if has_rnn:
        return "RNN", "recurrent layers (RNN/LSTM/GRU)"
    if has_conv:
        return "CNN", "convolutions, no attention"
    if has_linear:
        return "MLP", "only linear layers (and activations)"
    return "unknown", "no linear, convolution, recurrent or attention modules found"


def _is_patch_embedding(name: str, conv: nn.Module) -> bool:
    """A convolution that cuts an image into non-overlapping patches (kernel = stride), as ViTs do."""
    kernel, stride = getattr(conv, "kernel_size", None), getattr(conv, "stride", None)
    return "patch" in name.lower() or (kernel is not None and tuple(kernel) == tuple(stride or ()))


_DECODER_TYPES = {"gpt2", "llama", "mistral", "qwen2", "gpt_neox", "phi", "gemma", "opt", "bloom", "falcon", "smollm"}


def classify_names(names: list[str], shapes: dict[str, tuple[int, ...]]) -> tuple[str, str]:
    """The same question for a weights-only file: from tensor names and shapes alone."""
    joined = " ".join(names)
    has_attn = bool(_ATTN_NAME.search(joined)) or "c_attn" in joined
    conv = any(len(s) in (3, 4, 5) for s in shapes.values())
    if has_attn and ("lm_head" in joined or "embed_tokens" in joined or "wte" in joined):
        return "decoder-only transformer (from tensor names)", "attention and token-embedding tensor names"
    if has_attn:
        return "transformer (from tensor names)", "attention tensor names"
    if "A_log" in joined:
        return "state-space model (from tensor names)", "A_log tensors (Mamba's selective scan)"
    if conv:
        return "CNN (from tensor shapes)", "3- to 5-D weight tensors (convolutions)"
    if any(len(s) == 2 for s in shapes.values()):
        return "MLP (from tensor shapes)", "2-D weight tensors only"
    return "unknown", "no weight matrices"


def describe(model: nn.Module) -> Architecture:
    kind, reason = classify(model)
    share, total = param_share(model)
    return Architecture(kind, reason, module_counts(model), share, total)
