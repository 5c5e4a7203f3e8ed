"""Token classifiers: a label per token, scored by per-token accuracy."""

from __future__ import annotations

from typing import Any, ClassVar

from modelxray.kinds.sequence_classification import paragraph_calibration
from modelxray.kinds.windows import WindowsKind, num_labels, sample_passages


class TokenClassifier(WindowsKind):
    name: ClassVar[str] = "token_classification"
    task: ClassVar[str] = "token_classification"
    noun: ClassVar[str] = "token classifier"
    models: ClassVar[str] = "`hf` with a `...ForTokenClassification` config"
    datasets: ClassVar[str] = (
        "any text dataset: each word tagged by its shape (word, Capitalized, number, punctuation, keyword)"
    )
    quality: ClassVar[str] = "per-token accuracy and loss, standard errors with texts as units"
    hf_tables: ClassVar[tuple[str, ...]] = ("MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",)
    auto_class: ClassVar[str] = "AutoModelForTokenClassification"
    fitting: ClassVar[str] = (
        "a text dataset (its words tagged by their shape); dataset=labelled_text labels whole texts, not tokens"
    )
    headline: ClassVar[str] = "accuracy"
    scored_by: ClassVar[str] = "token_labels"
    perplexity_name: ClassVar[str] = "tag perplexity"
    reads_id_tuples: ClassVar[bool] = True

    def from_text(self, dataset: Any, loaded: Any, progress: bool) -> Any:
        from modelxray.data.text_tasks import tagged_windows

        texts = sample_passages(dataset.read_text(), dataset.examples, dataset.task_seed)
        tags = min(num_labels(loaded.model), 5)
        return tagged_windows(texts, loaded.tokenizer, dataset.seq_len, tags, dataset.name)

    def calibration_from_text(self, data: Any, dataset: Any, loaded: Any, progress: bool, n: int, seed: int):
        return paragraph_calibration(data, dataset, loaded, n, seed)
