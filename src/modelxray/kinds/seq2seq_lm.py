"""Encoder-decoders (T5, BART, Marian, Pegasus ...): a target scored given its source, teacher-forced,
and greedy generations."""

from __future__ import annotations

from typing import Any, ClassVar

from modelxray.kinds.windows import WindowsKind, decoder_start


class Seq2SeqLM(WindowsKind):
    name: ClassVar[str] = "seq2seq_lm"
    task: ClassVar[str] = "seq2seq_lm"
    noun: ClassVar[str] = "sequence-to-sequence model"
    models: ClassVar[str] = "`hf` with a seq2seq config (T5, mT5, BART, Marian, Pegasus ...)"
    datasets: ClassVar[str] = (
        "any text dataset: denoising pairs (a passage with `dataset.drop_rate` of its words dropped -> the passage); "
        "`text_pairs` (your JSONL of source/target)"
    )
    quality: ClassVar[str] = (
        "teacher-forced target loss, perplexity and accuracy; chrF and BLEU (sacrebleu) of greedy outputs, with "
        "bootstrap errors"
    )
    hf_tables: ClassVar[tuple[str, ...]] = ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",)
    auto_class: ClassVar[str] = "AutoModelForSeq2SeqLM"
    fitting: ClassVar[str] = "a text dataset (pydoc_topics: denoising pairs) or dataset=text_pairs"
    headline: ClassVar[str] = "perplexity"
    perplexity_name: ClassVar[str] = "target perplexity (teacher-forced)"
    reads_id_tuples: ClassVar[bool] = True
    decoder_from_labels: ClassVar[bool] = True

    def from_text(self, dataset: Any, loaded: Any, progress: bool) -> Any:
        from modelxray.data.text_tasks import denoising_pairs, seq2seq_windows

        pairs = denoising_pairs(dataset.read_text(), dataset.examples, dataset.drop_rate, dataset.task_seed)
        desc = (
            f"{len(pairs)} passages of {dataset.name} with a seeded {dataset.drop_rate:.0%} of words dropped from the "
            "source; the target is the whole passage"
        )
        prompt = decoder_start(loaded.model)
        return seq2seq_windows(pairs, loaded.tokenizer, prompt, dataset.seq_len, dataset.seq_len, dataset.name, desc)

    def from_dataset(self, dataset: Any, loaded: Any) -> Any:
        from modelxray.data.text_tasks import seq2seq_windows
        from modelxray.data.user_text import TextPairs

        if not isinstance(dataset, TextPairs):
            return None
        pairs = dataset.read()
        desc = f"{len(pairs)} source/target pairs from {dataset.path}"
        prompt = decoder_start(loaded.model)
        return seq2seq_windows(pairs, loaded.tokenizer, prompt, dataset.seq_len, dataset.seq_len, dataset.name, desc)

    def calibration_from_text(self, data: Any, dataset: Any, loaded: Any, progress: bool, n: int, seed: int):
        from modelxray.data.text_tasks import denoising_pairs, seq2seq_windows

        evaluated = frozenset(data.meta["references"])
        pairs = denoising_pairs(dataset.read_text(), n, dataset.drop_rate, seed, exclude=evaluated)
        prompt = data.meta["prompt"]
        windows = seq2seq_windows(pairs, loaded.tokenizer, prompt, dataset.seq_len, dataset.seq_len, "", "").windows
        return windows, f"other passages with {dataset.drop_rate:.0%} of words dropped"
