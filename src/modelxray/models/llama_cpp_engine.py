"""``model.engine=llama_cpp``: a GGUF file evaluated by llama.cpp itself (llama-cpp-python) instead of
dequantized into PyTorch. llama.cpp's kernels compute with the file's quantized blocks and round
activations to 8 bits, so the numbers are the ones the deployed artifact gives. The model is fed
modelxray's own token ids (the transformers GGUF tokenizer's), so both engines score the same tokens.

Why our own wrapper: the analyzers score any ``nn.Module`` that maps token ids to logits; this
module is that, over llama-cpp-python's ``Llama.eval`` with every position's logits kept."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from modelxray.core.subject import LoadedModel, ModelInfo

if TYPE_CHECKING:
    from modelxray.models.gguf import GGUFSource


class LlamaCppModel(nn.Module):
    """Token ids (B, T) -> logits (B, T, vocabulary), each row evaluated by llama.cpp from an empty
    context. It holds no PyTorch parameter: analyses that read or change weights need the PyTorch
    engine."""

    engine = "llama_cpp"

    def __init__(self, llm, path: str):
        super().__init__()
        self.llm, self.path = llm, path
        self.vocab_size = int(llm.n_vocab())

    def forward(self, input_ids: torch.Tensor, **_: object) -> torch.Tensor:
        rows = []
        for row in input_ids.reshape(-1, input_ids.shape[-1]).tolist():
            self.llm.reset()
            self.llm.eval(row)
            rows.append(torch.from_numpy(np.array(self.llm.scores[: len(row)], dtype=np.float32)))
        return torch.stack(rows).reshape(*input_ids.shape, self.vocab_size)


def load_llama_cpp(source: GGUFSource) -> LoadedModel:
    """The GGUF file of ``source`` in llama.cpp, with the tokenizer transformers reads from it."""
    from llama_cpp import Llama

    from modelxray.models.gguf_load import _DONE, cache_path, gguf_provenance

    path = source.resolved_file()
    tokenizer = _tokenizer(path, cache_path(source.cache_dir, path) if source.use_disk_cache else None, _DONE)
    threads = torch.get_num_threads()
    llm = Llama(model_path=str(path), n_ctx=source.n_ctx, logits_all=True, n_threads=threads, verbose=False)
    provenance = gguf_provenance(str(path))
    info = ModelInfo(
        name=source.name or path.stem,
        source_format="gguf (llama.cpp)",
        source_dtype=provenance["source_dtype"],
        file_path=str(path),
        file_bytes=path.stat().st_size,
        notes=[
            f"Evaluated by llama.cpp ({threads} threads) from the file's quantized blocks, its kernels rounding "
            "activations to 8 bits: the numbers the deployed file gives. The token ids are transformers' GGUF "
            "tokenizer's, as with the PyTorch engine (llama.cpp's own tokenizer splits runs of spaces differently)."
        ],
    )
    return LoadedModel(LlamaCppModel(llm, str(path)), tokenizer, info)


def _tokenizer(path, cache, done: str):
    from transformers import AutoTokenizer

    if cache is not None and (cache / done).exists():
        return AutoTokenizer.from_pretrained(cache)
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
