"""Masked language models (BERT, RoBERTa, DeBERTa, ModernBERT ...): scored at a seeded pattern of
masked tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from modelxray.kinds.windows import WindowsKind, cache_dir


class MaskedLM(WindowsKind):
    name: ClassVar[str] = "masked_lm"
    task: ClassVar[str] = "masked_lm"
    noun: ClassVar[str] = "masked language model"
    models: ClassVar[str] = "`hf` with a `...ForMaskedLM` config (BERT, RoBERTa, DeBERTa, ModernBERT ...)"
    datasets: ClassVar[str] = "any text dataset: seeded masked windows (`dataset.mask_rate`, `dataset.task_seed`)"
    quality: ClassVar[str] = (
        "masked-token loss, perplexity and accuracy at the masked tokens (standard errors, windows as units)"
    )
    hf_tables: ClassVar[tuple[str, ...]] = ("MODEL_FOR_MASKED_LM_MAPPING_NAMES",)
    auto_class: ClassVar[str] = "AutoModelForMaskedLM"
    fitting: ClassVar[str] = "a text dataset (pydoc_topics, text_files, hf, wikitext2)"
    headline: ClassVar[str] = "perplexity"
    perplexity_name: ClassVar[str] = "masked-token perplexity"
    seq_len_within_positions: ClassVar[bool] = True
    reads_id_tuples: ClassVar[bool] = True
    streams_from_disk: ClassVar[bool] = True

    def from_text(self, dataset: Any, loaded: Any, progress: bool) -> Any:
        from modelxray.data.base import tokenize_cached
        from modelxray.data.text_tasks import masked_windows

        ids = tokenize_cached(dataset.read_text(), loaded.tokenizer, Path(cache_dir(dataset)) / "tokens")
        return masked_windows(
            ids, loaded.tokenizer, dataset.seq_len, dataset.examples, dataset.mask_rate, dataset.task_seed, dataset.name
        )

    def calibration_from_text(self, data: Any, dataset: Any, loaded: Any, progress: bool, n: int, seed: int):
        from modelxray.data.base import tokenize_cached
        from modelxray.data.text_tasks import masked_body, masked_windows

        tok = loaded.tokenizer
        ids = tokenize_cached(dataset.read_text(), tok, Path(cache_dir(dataset)) / "tokens")
        rest = ids[data.n_examples * masked_body(tok, dataset.seq_len) :]
        windows = masked_windows(rest, tok, dataset.seq_len, n, dataset.mask_rate, seed, dataset.name).windows
        return windows, "masked windows after the evaluated ones"
