"""Quantizing with llama.cpp (``GGUFQuantizer``): a copy's weights written as an F32 GGUF file,
quantized by ``llama_model_quantize`` in a child process (llama.cpp aborts the process on a bad
file, which must not take the run down), and read back through the ``gguf`` package's
dequantization.

Tensors are named as llama.cpp's converter names them (``blk.0.attn_v.weight`` ...) when the
``gguf`` package maps the model's architecture, so llama.cpp picks each tensor's type by its role as
it would for a converted model; other architectures are written with neutral names and every
Linear layer gets the type's base format. Query and key rows are not reordered as the converter
does for llama.cpp's rotary layout: every type quantizes row by row, so the order of rows changes
no stored value.
"""

from __future__ import annotations

import copy
import logging
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from modelxray.core.progress import bar
from modelxray.quant.library_backend import chosen_linears
from modelxray.quant.library_swap import conv1d_to_linear
from modelxray.quant.rtn import relative_error
from modelxray.quant.summary import layer_row, quant_result
from modelxray.quant.targets import find_targets

if TYPE_CHECKING:
    from torch import nn

    from modelxray.core.result import Result
    from modelxray.quant.gguf_backend import GGUFQuantizer

# Hugging Face model types that llama.cpp's converter writes under another architecture's name
ARCH_ALIASES = {"mistral": "llama", "mixtral": "llama"}

# what llama.cpp reads of a model's shape before it quantizes (written under every spelling its
# architectures use; a value it does not need is ignored)
HPARAMS = {
    "context_length": ("max_position_embeddings", "n_positions", "n_ctx"),
    "embedding_length": ("hidden_size", "n_embd", "d_model"),
    "block_count": ("num_hidden_layers", "n_layer", "num_layers"),
    "feed_forward_length": ("intermediate_size", "n_inner", "ffn_dim"),
    "attention.head_count": ("num_attention_heads", "n_head"),
    "attention.head_count_kv": ("num_key_value_heads", "num_attention_heads", "n_head"),
    "attention.layer_norm_rms_epsilon": ("rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps"),
    "attention.layer_norm_epsilon": ("layer_norm_epsilon", "layer_norm_eps", "rms_norm_eps"),
}

CHILD = """
import sys, llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype = getattr(llama_cpp, sys.argv[3])
p.nthread = int(sys.argv[4])
p.allow_requantize = True
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p))
"""
STEP = re.compile(r"^\[\s*(\d+)/\s*(\d+)\]")  # llama.cpp's line per tensor: [  3/ 272] name ...


def architecture(model: nn.Module) -> str | None:
    """The llama.cpp architecture the model converts to, None where the ``gguf`` package maps none."""
    import gguf

    model_type = getattr(getattr(model, "config", None), "model_type", None)
    model_type = ARCH_ALIASES.get(model_type, model_type)
    return model_type if model_type in set(gguf.MODEL_ARCH_NAMES.values()) else None


def tensor_names(model: nn.Module, arch: str | None, chosen: set[str]) -> dict[str, str]:
    """GGUF tensor name -> the model's parameter name: each parameter llama.cpp's converter would
    write (once for tied weights), or with ``arch`` None the chosen Linear weights under neutral names."""
    import gguf

    params = dict(model.named_parameters())  # tied weights once, under their first name
    if arch is None:
        return {f"w{i}.weight": f"{name}.weight" for i, name in enumerate(sorted(chosen))}
    arch_id = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}[arch]
    n_blocks = _hparam(model, HPARAMS["block_count"]) or 0
    mapping = gguf.get_tensor_name_map(arch_id, int(n_blocks))
    names = {}
    for name in params:
        gguf_name = mapping.get_name(name, try_suffixes=(".weight", ".bias"))
        if gguf_name is not None and gguf_name not in names:
            names[gguf_name] = name
    return names


def write_source(model: nn.Module, path: Path, arch: str | None, names: dict[str, str]) -> None:
    """The F32 GGUF file llama.cpp quantizes from, written one tensor at a time (memory stays one
    tensor above the model's)."""
    import gguf

    chatter = logging.getLogger("gguf")  # the writer logs each file it writes at INFO: not the run's news
    level = chatter.level
    chatter.setLevel(logging.WARNING)
    try:
        _write(gguf, model, path, arch, names)
    finally:
        chatter.setLevel(level)


def _write(gguf, model: nn.Module, path: Path, arch: str | None, names: dict[str, str]) -> None:
    writer = gguf.GGUFWriter(path, arch or "llama")
    if arch is None:  # a shape llama.cpp accepts for a file of neutral tensors
        for key, value in (("block_count", 1), ("context_length", 1), ("embedding_length", 1)):
            writer.add_uint32(f"llama.{key}", value)
        writer.add_uint32("llama.feed_forward_length", 1)
        writer.add_uint32("llama.attention.head_count", 1)
        writer.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    else:
        for key, sources in HPARAMS.items():
            value = _hparam(model, sources)
            if value is not None:
                if "epsilon" in key:
                    writer.add_float32(f"{arch}.{key}", float(value))
                else:
                    writer.add_uint32(f"{arch}.{key}", int(value))
    params = dict(model.named_parameters())
    for gguf_name, name in names.items():
        p = params[name]
        writer.add_tensor_info(gguf_name, tuple(p.shape), np.dtype(np.float32), p.numel() * 4)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for name in names.values():
        writer.write_tensor_data(params[name].detach().to(device="cpu", dtype=torch.float32).numpy())
    writer.close()


def run_llama_quantize(source: Path, out: Path, quantizer: GGUFQuantizer, total: int, progress: bool) -> None:
    """llama.cpp's quantizer in a child process, its per-tensor lines as a progress bar; its last
    error line in one ``RuntimeError`` when it fails."""
    ftype = {"F32": "LLAMA_FTYPE_ALL_F32"}.get(quantizer.type, f"LLAMA_FTYPE_MOSTLY_{quantizer.type}")
    threads = quantizer.threads or torch.get_num_threads()
    cmd = [sys.executable, "-c", CHILD, str(source), str(out), ftype, str(threads)]
    lines: list[str] = []
    with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        steps = bar(total=total, desc=f"llama.cpp {quantizer.type}", enabled=progress)
        for line in proc.stderr:
            lines.append(line.rstrip())
            if STEP.match(line):
                steps.update(1)
        steps.close()
    if proc.returncode != 0:
        said = [x for x in lines if "error" in x.lower() or "assert" in x.lower() or "failed" in x.lower()]
        raise RuntimeError(f"llama.cpp could not quantize to {quantizer.type}: {(said or lines or ['no output'])[-1]}")


def quantize_gguf(quantizer: GGUFQuantizer, model: nn.Module, progress: bool = True) -> tuple[nn.Module, Result]:
    import gguf
    import llama_cpp

    start = time.perf_counter()
    original, model = model, copy.deepcopy(model)
    targets = find_targets(model)
    chosen = chosen_linears(targets, quantizer.skip)
    conv1d_to_linear(model, chosen)  # GPT-2's Conv1D stores in x out; GGUF stores out x in
    arch = architecture(model)
    notes = []
    with tempfile.TemporaryDirectory(prefix="modelxray-gguf-") as tmp:
        source, out = Path(tmp) / "source-f32.gguf", Path(tmp) / f"{quantizer.type}.gguf"
        names = tensor_names(model, arch, chosen)
        write_source(model, source, arch, names)
        try:
            run_llama_quantize(source, out, quantizer, len(names), progress)
        except RuntimeError as err:
            if arch is None:
                raise
            notes.append(f"llama.cpp refused the model as a '{arch}' model ({err}); it was quantized by layer instead.")
            arch, names = None, tensor_names(model, None, chosen)
            write_source(model, source, None, names)
            run_llama_quantize(source, out, quantizer, len(names), progress)
        rows = _read_back(model, gguf.GGUFReader(out), names, quantizer.skip, targets)
    kinds = Counter(r["format"] for r in rows)
    mix = ", ".join(f"{k} x{n}" for k, n in kinds.most_common())
    how = (
        f"by its role in a '{arch}' model"
        if arch
        else "alike for every Linear layer (llama.cpp does not know this architecture, so its rules by tensor role do not apply)"
    )
    notes.insert(
        0,
        f"llama.cpp {quantizer.type} (llama-cpp-python {llama_cpp.__version__}) chose each tensor's type {how}: {mix}. "
        "The weights are the values llama.cpp stores, dequantized and run in PyTorch; llama.cpp's own kernels "
        "also round activations to 8 bits (evaluate a GGUF file with model.engine=llama_cpp to measure that).",
    )
    if arch:
        left = sorted(n for n, p in model.named_parameters() if p.dim() >= 2 and n not in set(names.values()))
        if left:
            notes.append(f"Not written by llama.cpp's converter, left in float: {', '.join(left)}.")
    result = quant_result(
        f"llama.cpp {quantizer.type}", rows, original, time.perf_counter() - start, notes, source=quantizer
    )
    return model, result


def _read_back(model: nn.Module, reader, names: dict[str, str], skip: list[str], targets: list) -> list[dict]:
    """Each quantized tensor dequantized into the copy, and its report row."""
    import fnmatch

    import gguf

    params = dict(model.named_parameters())
    by_weight = {f"{t.name}.weight": t for t in targets}
    rows = []
    for tensor in reader.tensors:
        name = names.get(tensor.name)
        if name is None or tensor.tensor_type == gguf.GGMLQuantizationType.F32:
            continue
        module = name.rsplit(".", 1)[0]
        if any(fnmatch.fnmatchcase(module, p) for p in skip):
            continue
        p = params[name]
        values = torch.from_numpy(np.ascontiguousarray(gguf.quants.dequantize(tensor.data, tensor.tensor_type)))
        values = values.reshape(p.shape).to(dtype=p.dtype, device=p.device)
        original = p.detach().clone()
        with torch.no_grad():
            p.copy_(values)
        bits = round(8 * int(tensor.n_bytes) / p.numel(), 4)
        error = relative_error(original, values)
        fmt = tensor.tensor_type.name
        rows.append(layer_row(module, p, bits, fmt, int(tensor.n_bytes), error, by_weight.get(name), kind="weight"))
    return rows


def _hparam(model: nn.Module, sources: tuple[str, ...]):
    config = getattr(model, "config", None)
    for key in sources:
        value = getattr(config, key, None)
        if value is not None:
            return value
    return None
