"""Which input the compute analysis of ``analyzer=inspect`` runs a model on, and where it came from.

One tensor, in this order (the first that answers wins; the spec's ``source`` says which):

1. ``analyzer.inspect.input_shape`` (without the batch dimension; a model whose first layer is a
   convolution also takes the full ``[N, C, H, W]``);
2. the dataset's ``input_shape`` (classification data, already fit to an image model's input);
3. the model: the ``image_shape`` attribute of a wrapped Hugging Face image model
   (``PixelClassifier``); a ``Sequential`` that starts by unflattening a flat vector; a Hugging
   Face ``config.image_size`` / ``num_channels``; a ViT-style position embedding
   ``(1, extra + (H/p)*(W/p), D)`` together with its patch convolution (kernel and stride give
   ``H = W``, its ``in_channels`` give ``C``); token ids for a model with a token embedding
   (vocabulary and context length from the config or the embedding); the width of a first linear
   layer;
4. a first 2-D convolution: its weights do not say the image size, so the model's own forward
   says it (``models.image_shape.probe_image_size``: the one common square size it runs on);
5. otherwise nothing: the spec is ``unknown`` and the analyzer's preflight raises a one-line
   ``ConfigError`` naming ``analyzer.inspect.input_shape`` with an example, instead of a guess that
   fails in the forward.

The tensors a spec stands for are made by ``models.input_tensors``.

Several tensors (``analyzer.inspect.inputs``, name -> shape with the batch dimension, optional
``dtype`` and ``high``): passed by keyword to an ``nn.Module`` whose ``forward`` has those
parameter names, otherwise in the declared order onto ``forward``'s positional arguments (always
so for TorchScript, whose arguments are read from its schema). A model whose ``forward`` requires
several tensors, or a dual encoder whose ``forward`` requires none (Hugging Face ``CLIPModel``),
needs ``inputs``: without it the spec is ``unknown`` and names that key.
"""

from __future__ import annotations

import inspect
import math
import re
from dataclasses import dataclass

import torch
from torch import nn

from modelxray.models.architecture import _CONV, type_name
from modelxray.models.generic import smallest_embedding
from modelxray.models.image_shape import conv_dims, first_layer, in_channels, probe_image_size, vit_image_shape

_IDS = re.compile(r"(^|_)ids$")
_MASK = re.compile(r"mask")
_EXAMPLE_SHAPE = {1: [256], 2: [224, 224], 3: [16, 112, 112]}  # spatial part of an example input_shape


@dataclass
class Argument:
    name: str
    required: bool  # no default value
    positional: bool  # may be passed by position


def forward_arguments(model: nn.Module) -> tuple[list[Argument], bool] | None:
    """``forward``'s tensor-like arguments (without ``self``) and whether it takes ``**kwargs``;
    ``None`` when they cannot be read. TorchScript: from the method's schema."""
    if isinstance(model, torch.jit.ScriptModule):
        try:
            args = model.forward.schema.arguments[1:]
        except (AttributeError, RuntimeError):
            return None
        return [Argument(a.name, not a.has_default_value(), not a.kwarg_only) for a in args], False
    try:
        sig = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return None
    out, var_kw = [], False
    for p in sig.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            var_kw = True
        elif p.kind is not p.VAR_POSITIONAL:
            out.append(Argument(p.name, p.default is p.empty, p.kind is not p.KEYWORD_ONLY))
    return out, var_kw


def infer_input(
    model: nn.Module,
    *,
    batch_size: int,
    seq_len: int | None,
    input_shape: list[int] | None,
    data_shape: tuple[int, ...] | None = None,
    inputs: dict | None = None,
    data_name: str | None = None,
    kind: str | None = None,
    key: str = "analyzer.inspect.inputs",
) -> dict:
    """The input spec: ``kind`` (token_ids, features, image, named, unknown), ``shape`` (the first
    tensor's, batch included; ``None`` when unknown), ``source`` (where it came from); ``named``
    adds ``inputs`` (name -> shape, dtype, high), ``call`` and ``arguments``; ``unknown`` adds
    ``key`` and ``message`` (the ConfigError to raise). ``inputs`` is normalised by
    ``data.example_inputs.normalize_inputs``; ``kind`` is the architecture's classification."""
    if inputs:
        return _named(model, inputs, key)
    read = forward_arguments(model)
    required = [a.name for a in read[0] if a.required] if read else []
    # a dual encoder whose forward takes everything optionally (HF CLIPModel) needs both towers' inputs;
    # one wrapped to take one tensor (a zero-shot classifier: pixels -> class logits) does not
    if len(required) > 1 or (not required and (kind or "").startswith("dual encoder")):
        names = required if len(required) > 1 else ["pixel_values", "input_ids"]
        example = ",".join(f"{n}:{_example_named(n)}" for n in names)
        what = (
            f"forward takes {len(names)} tensors ({', '.join(names)})"
            if len(required) > 1
            else f"the model is a {kind}"
        )
        return _unknown(
            "analyzer.inspect.inputs",
            f"{what}, so one input_shape cannot describe its input; declare each one with its batch "
            f"dimension, e.g. analyzer.inspect.inputs='{{{example}}}' (ids are int64, others float32)",
        )
    if input_shape:
        first = first_layer(model)
        dims = conv_dims(first) if first is not None and type_name(first) in _CONV else None
        if dims is not None and len(input_shape) == dims + 2:  # [N, C, H, W] given: the batch is in it
            shape, note = [int(s) for s in input_shape], " with its batch dimension"
        else:
            shape, note = [batch_size, *(int(s) for s in input_shape)], ""
        kind_ = "image" if dims is not None and len(shape) == dims + 2 else "features"
        return {"kind": kind_, "shape": shape, "source": f"config (analyzer.inspect.input_shape{note})"}
    if data_shape is not None:
        kind_ = "image" if len(data_shape) == 3 else "features"
        name = f" {data_name}" if data_name else ""
        return {"kind": kind_, "shape": [batch_size, *data_shape], "source": f"dataset{name} (its input_shape)"}
    return _from_model(model, batch_size, seq_len)


# -- one tensor, from the model ---------------------------------------------------------------
def _from_model(model: nn.Module, batch_size: int, seq_len: int | None) -> dict:
    shape = getattr(model, "image_shape", None)
    if isinstance(shape, (tuple, list)) and len(shape) == 3:
        return {
            "kind": "image",
            "shape": [batch_size, *(int(s) for s in shape)],
            "source": "model (image_shape of the wrapped image model)",
        }
    first_child = next(iter(model.children()), None) if type_name(model) == "Sequential" else None
    lead = getattr(first_child, "image_shape", None)
    if isinstance(lead, (tuple, list)) and len(lead) == 3:  # a leading module that takes flat pixels or images
        return {
            "kind": "image",
            "shape": [batch_size, *(int(s) for s in lead)],
            "source": f"model (image_shape of its first module, {type_name(first_child)})",
        }
    if first_child is not None and type_name(first_child) == "Unflatten":
        size = getattr(first_child, "unflattened_size", None)
        if size and getattr(first_child, "dim", None) in (1, -len(size)):
            return {
                "kind": "features",
                "shape": [batch_size, math.prod(int(s) for s in size)],
                "source": f"model (a leading Unflatten to {tuple(size)})",
            }
    config = getattr(model, "config", None)
    size = getattr(config, "image_size", None)
    if isinstance(size, (list, tuple)) and size:
        h, w = int(size[0]), int(size[-1])
    elif isinstance(size, int) and not isinstance(size, bool):
        h = w = size
    else:
        h = w = None
    if h:
        c = int(getattr(config, "num_channels", None) or 3)
        return {"kind": "image", "shape": [batch_size, c, h, w], "source": "model (config.image_size, num_channels)"}
    vit = vit_image_shape(model)
    if vit is not None:
        chw, why = vit
        return {"kind": "image", "shape": [batch_size, *chw], "source": f"model ({why})"}
    emb = next((m for m in model.modules() if type_name(m) == "Embedding"), None)
    if emb is not None:
        return _token_ids(model, emb, batch_size, seq_len)
    first = first_layer(model)
    if first is not None and type_name(first) in _CONV:
        dims = conv_dims(first) or 2
        c = in_channels(first)
        size, found = probe_image_size(model, c) if dims == 2 else (None, "")
        if size is not None:
            return {"kind": "image", "shape": [batch_size, c, size, size], "source": f"model ({found})"}
        example = ",".join(str(s) for s in [c, *_EXAMPLE_SHAPE.get(dims, [224, 224])])
        return _unknown(
            "analyzer.inspect.input_shape",
            f"cannot infer this model's input: its first layer is a {type_name(first)} taking {c} channels, and "
            "a convolution's weights do not say the image size" + (f" ({found})" if found else "") + "; set the "
            f"shape without the batch dimension, e.g. analyzer.inspect.input_shape=[{example}]",
        )
    if first is not None:
        return {
            "kind": "features",
            "shape": [batch_size, int(first.weight.shape[1])],
            "source": "model (width of the first linear layer)",
        }
    return _unknown(
        "analyzer.inspect.input_shape",
        "cannot infer this model's input (no image size, embedding, convolution or linear layer found); set the "
        "shape without the batch dimension, e.g. analyzer.inspect.input_shape=[3,224,224]",
    )


def _token_ids(model: nn.Module, emb: nn.Module, batch_size: int, seq_len: int | None) -> dict:
    config = getattr(model, "config", None)
    vocab = getattr(config, "vocab_size", None) or int(emb.weight.shape[0])
    ctx = next(
        (getattr(config, k) for k in ("max_position_embeddings", "n_positions", "n_ctx") if getattr(config, k, None)),
        None,
    )
    t = seq_len or min(ctx or 256, 256)
    if ctx:
        t = min(t, ctx)
    return {
        "kind": "token_ids",
        "shape": [batch_size, t],
        "vocab_size": int(vocab),
        "context_length": int(ctx) if ctx else None,
        "source": "config" if config is not None else "embedding",
    }


# -- several named tensors ---------------------------------------------------------------------
def _example_named(name: str) -> str:
    """An example shape for an argument by its name's modality: ids and masks, audio, speech
    features, images (the rest)."""
    if _IDS.search(name) or _MASK.search(name):
        return "[1,16]"
    if _AUDIO.search(name):
        return "[1,16000]"  # one second of 16 kHz audio
    if "features" in name:
        return "[1,80,3000]"  # log-mel frames, as Whisper takes them
    return "[1,3,224,224]"


_AUDIO = re.compile(r"input_values|audio|wave|wav|speech", re.IGNORECASE)


def default_dtype(name: str) -> str | None:
    """int64 for ids and masks; ``None`` (the model's floating dtype) otherwise."""
    return "int64" if _IDS.search(name) or _MASK.search(name) else None


def _named(model: nn.Module, inputs: dict, key: str = "analyzer.inspect.inputs") -> dict:
    from modelxray.core.errors import ConfigError

    names = list(inputs)
    read = forward_arguments(model)
    scripted = isinstance(model, torch.jit.ScriptModule)
    if read is None:
        call, arguments = "keyword", names
    else:
        args, var_kw = read
        params = {a.name for a in args}
        if not scripted and (var_kw or set(names) <= params):
            call, arguments = "keyword", names
        else:
            positional = [a for a in args if a.positional]
            if len(names) > len(positional):
                raise ConfigError(
                    key,
                    f"declares {len(names)} tensors ({', '.join(names)}) and forward takes "
                    f"{len(positional)} ({', '.join(a.name for a in positional) or 'none'})",
                )
            missing = [a.name for a in positional[len(names) :] if a.required]
            missing += [a.name for a in args if not a.positional and a.required]
            if missing:
                raise ConfigError(
                    key,
                    f"forward also needs {', '.join(missing)}: declare every tensor it takes, in its order "
                    f"({', '.join(a.name for a in positional)})",
                )
            call, arguments = "positional", [a.name for a in positional[: len(names)]]
    high = smallest_embedding(model)
    floating = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    spec = {}
    for name, v in inputs.items():
        if "value" in v:  # a fixed non-tensor argument, passed as it is
            spec[name] = {"value": v["value"]}
            continue
        dtype = v.get("dtype") or default_dtype(name) or str(floating).replace("torch.", "")
        entry = {"shape": list(v["shape"]), "dtype": dtype}
        if dtype in ("int64", "int32"):
            if _MASK.search(name):
                entry["values"] = "ones"
            else:
                entry["high"] = int(v.get("high") or high or 2)
        spec[name] = entry
    shaped = [e["shape"] for e in spec.values() if "shape" in e]
    if not shaped:
        raise ConfigError(
            key, f"declares only fixed values ({', '.join(names)}): declare the tensors forward takes too"
        )
    first = shaped[0]
    return {
        "kind": "named",
        "shape": first,
        "inputs": spec,
        "call": call,
        "arguments": arguments,
        "source": f"config ({key})",
    }


def _unknown(key: str, message: str) -> dict:
    return {"kind": "unknown", "shape": None, "source": message, "key": key, "message": message}
