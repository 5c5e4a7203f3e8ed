"""Causal language models: next-token prediction on windows of a tokenized text."""

from __future__ import annotations

from typing import Any, ClassVar

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
    trains_as: ClassVar[str | None] = "causal_lm"
    from_file: ClassVar[bool] = True
    from_target: ClassVar[bool] = True

    def degenerate_signs(self, metrics: dict, subject: Any, uniform_share: float) -> list[str]:
        from modelxray.metrics.degenerate import language_model_signs

        return language_model_signs(metrics.get("perplexity", 0.0), output_vocab(subject.model), uniform_share)

    def reference_work(self):
        from modelxray.measure.reference_outputs import lm_reference

        return lm_reference

    def data_type(self) -> type | None:
        from modelxray.data.base import TokenData

        return TokenData

    def trial_inputs(self, subject: Any, full: bool = False) -> Any:
        """The first ``TRIAL_TOKENS`` tokens of the text, or of the user's first row: a short window
        (whether a full one fits the model's positions is checked from its config); with ``full``,
        the whole first window (a model traced at one length runs no other)."""
        from modelxray.measure.scoring import model_device
        from modelxray.metrics.windows import windows_from_batches

        if subject.data is not None:
            ids = subject.data.ids[: subject.data.seq_len if full else min(TRIAL_TOKENS, subject.data.seq_len)]
        elif subject.batches is not None:
            ids = windows_from_batches(subject.batches)[0].inputs[: None if full else TRIAL_TOKENS]
        else:
            return None
        return ids.reshape(1, -1).to(model_device(subject.model))


TRIAL_TOKENS = 16  # the trial forward's window: enough for every layer to run, cheap on a 70B model


def output_vocab(model: Any) -> int | None:
    """The tokens a language model scores: its config's (text config's) ``vocab_size``, else its output
    layer's rows."""
    config = getattr(model, "config", None)
    size = getattr(config, "vocab_size", None) or getattr(getattr(config, "text_config", None), "vocab_size", None)
    if size:
        return int(size)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return int(head.weight.shape[0]) if head is not None and hasattr(head, "weight") else None
