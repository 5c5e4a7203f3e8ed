"""Causal language models: next-token prediction on windows of a tokenized text."""

from __future__ import annotations

from typing import ClassVar

from modelxray.kinds.base import Kind


class CausalLM(Kind):
    name: ClassVar[str] = "causal_lm"
    task: ClassVar[str] = "causal_lm"
    noun: ClassVar[str] = "causal language model"
    models: ClassVar[str] = (
        "`smollm2` (default), `tiny_gpt2`, `hf` with a `...ForCausalLM` config, `file` with an architecture"
    )
    datasets: ClassVar[str] = (
        "text: `pydoc_topics`, `text_files`, `hf` (any Hugging Face dataset's text column), `wikitext2`, `c4`"
    )
    quality: ClassVar[str] = "perplexity, bits per byte, top-k next-token accuracy"
    hf_tables: ClassVar[tuple[str, ...]] = ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",)
    auto_class: ClassVar[str] = "AutoModelForCausalLM"
    modalities: ClassVar[tuple[str, ...]] = ("text",)
    fitting: ClassVar[str] = "a text dataset, e.g. dataset=pydoc_topics"
    headline: ClassVar[str] = "perplexity"
    seq_len_within_positions: ClassVar[bool] = True
    places_on_devices: ClassVar[bool] = True
    streams_from_disk: ClassVar[bool] = True
    takes_byte_tokenizer: ClassVar[bool] = True
    reads_token_batches: ClassVar[bool] = True
    caches_reference: ClassVar[bool] = True
    from_file: ClassVar[bool] = True
    from_target: ClassVar[bool] = True

    def reference_work(self):
        from modelxray.measure.reference_outputs import lm_reference

        return lm_reference

    def data_type(self) -> type | None:
        from modelxray.data.base import TokenData

        return TokenData
