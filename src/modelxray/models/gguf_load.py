"""Loading a ``GGUFSource``: dequantize with transformers, cache the result, record provenance.

transformers dequantizes GGUF weights to floating point (``gguf_file=``), which takes ~30 s in a
fresh process. The converted weights are cached as safetensors under ``cache_dir`` keyed by the
file's SHA-256, so later runs load in well under a second. The file's own tensor types are read
with the ``gguf`` package and recorded as provenance: the "unquantized" baseline of a Q4_1 file is
a model dequantized from 4 bits, and reports say so.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from modelxray.core.subject import LoadedModel, ModelInfo

if TYPE_CHECKING:
    from modelxray.models.gguf import GGUFSource

_BITS = {
    "Q4_0": 4,
    "Q4_1": 4,
    "Q4_K": 4,
    "Q5_0": 5,
    "Q5_1": 5,
    "Q5_K": 5,
    "Q8_0": 8,
    "Q8_K": 8,
    "Q2_K": 2,
    "Q3_K": 3,
    "Q6_K": 6,
    "IQ4_NL": 4,
    "IQ4_XS": 4,
}
_PROVENANCE = "modelxray_provenance.json"
_DONE = "modelxray_complete"


def _role(tensor_name: str) -> str:
    if "token_embd" in tensor_name or tensor_name.startswith("output.") and "norm" not in tensor_name:
        return "embeddings"
    if "norm" in tensor_name:
        return "norms"
    return "linear"


def gguf_provenance(path: str) -> dict:
    """Parameter counts per GGUF tensor type and role (linear / embeddings / norms)."""
    from gguf import GGUFReader

    reader = GGUFReader(path)
    by_role: dict[str, Counter] = {}
    for t in reader.tensors:
        by_role.setdefault(_role(t.name), Counter())[t.tensor_type.name] += int(t.n_elements)
    summary = {role: counts.most_common(1)[0][0] for role, counts in by_role.items()}
    linear_type = summary.get("linear", "")
    return {
        "types_by_role": {r: dict(c) for r, c in by_role.items()},
        "source_dtype": ", ".join(f"{summary[r]} ({r})" for r in ("linear", "embeddings", "norms") if r in summary),
        "linear_bits": _BITS.get(linear_type),
    }


def file_sha256(path: str, chunk: int = 1 << 22) -> str:
    """The file's SHA-256, read once per version of the file (its size and change time) in a process:
    the tokenizer checked before the load and the load itself both key the cache by it."""
    st = os.stat(path)
    return _sha256(str(path), st.st_size, st.st_mtime_ns, chunk)


@functools.lru_cache(maxsize=32)
def _sha256(path: str, _size: int, _mtime_ns: int, chunk: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def load_gguf(source: GGUFSource) -> LoadedModel:
    """The model and tokenizer of ``source``: from the disk cache, or converted now (and cached)."""
    gguf_path = source.resolved_file()
    cache = cache_path(source.cache_dir, gguf_path) if source.use_disk_cache else None
    if cache is not None and (cache / _DONE).exists():
        model, tokenizer = _load_hf_dir(cache)
        provenance = json.loads((cache / _PROVENANCE).read_text())
    else:
        model, tokenizer = _convert(gguf_path)
        provenance = gguf_provenance(str(gguf_path))
        if cache is not None:
            _save_cache(cache, model, tokenizer, provenance)
    bits = provenance.get("linear_bits")
    notes = []
    if bits:
        notes.append(
            f"The weights come from a GGUF file whose linear layers are stored in {bits} bits "
            f"({provenance['source_dtype']}); the 'unquantized' baseline is this model dequantized to "
            f"{source.dtype}, not an original full-precision checkpoint."
        )
    info = ModelInfo(
        name=source.name or gguf_path.stem,
        source_format="gguf",
        source_dtype=provenance["source_dtype"],
        file_path=str(gguf_path),
        file_bytes=gguf_path.stat().st_size,
        dequantized_from_bits=bits,
        notes=notes,
    )
    return LoadedModel(source.place(model), tokenizer, info)


def cache_path(cache_dir: str, gguf_path: Path) -> Path:
    return Path(os.path.expanduser(cache_dir)) / "gguf" / file_sha256(str(gguf_path))[:24]


def _convert(gguf_path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, fname = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=fname)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=fname)
    # The weights are now plain floats; drop the GGUF quantizer so the model saves and copies
    # like any other.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model, tokenizer


def _load_hf_dir(folder: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(str(folder)), AutoTokenizer.from_pretrained(str(folder))


def _save_cache(cache: Path, model, tokenizer, provenance: dict) -> None:
    """Write the converted model atomically (temp dir, then rename) so parallel jobs never see half."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=cache.name + ".", dir=cache.parent))
    try:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        (tmp / _PROVENANCE).write_text(json.dumps(provenance, indent=2))
        (tmp / _DONE).write_text("ok\n")
        try:
            tmp.rename(cache)
        except OSError:  # another process won the race; its copy is as good as ours
            pass
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
