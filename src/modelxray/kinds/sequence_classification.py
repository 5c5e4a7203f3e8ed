"""Text classifiers: one label per text, scored by accuracy."""

from __future__ import annotations

from typing import Any, ClassVar

from modelxray.core.errors import ConfigError
from modelxray.kinds.windows import WindowsKind, num_labels, sample_passages


class TextClassifier(WindowsKind):
    name: ClassVar[str] = "sequence_classification"
    task: ClassVar[str] = "sequence_classification"
    noun: ClassVar[str] = "text classifier"
    models: ClassVar[str] = "`hf` with a `...ForSequenceClassification` config"
    datasets: ClassVar[str] = (
        "`pydoc_topics`: paragraphs labelled by documentation topic (as many topics as the model has labels); "
        "`labelled_text` (your CSV/JSONL of text,label)"
    )
    quality: ClassVar[str] = "accuracy with a 95% Wilson interval, loss"
    hf_tables: ClassVar[tuple[str, ...]] = ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",)
    auto_class: ClassVar[str] = "AutoModelForSequenceClassification"
    fitting: ClassVar[str] = "dataset=pydoc_topics (paragraphs labelled by topic) or dataset=labelled_text"
    headline: ClassVar[str] = "accuracy"
    scored_by: ClassVar[str] = "label"
    perplexity_name: ClassVar[str] = "label perplexity"
    reads_id_tuples: ClassVar[bool] = True

    def from_text(self, dataset: Any, loaded: Any, progress: bool) -> Any:
        if dataset.name != "pydoc_topics":
            raise ConfigError("dataset", f"{dataset.name} has no labels; use {self.fitting}")
        from pydoc_data.topics import topics

        from modelxray.data.text_tasks import classification_windows, topic_paragraphs

        texts, labels, names = topic_paragraphs(topics, num_labels(loaded.model), dataset.examples, dataset.task_seed)
        desc = f"{len(texts)} paragraphs of the Python docs labelled by their topic ({len(names)} topics)"
        return classification_windows(texts, labels, loaded.tokenizer, dataset.seq_len, dataset.name, desc, names)

    def from_dataset(self, dataset: Any, loaded: Any) -> Any:
        from modelxray.data.text_tasks import classification_windows
        from modelxray.data.user_text import LabelledText

        if not isinstance(dataset, LabelledText):
            return None
        texts, labels = dataset.read()
        ids, names = label_ids(labels, loaded.model, dataset.path)
        desc = f"{len(texts)} labelled texts from {dataset.path}"
        return classification_windows(texts, ids, loaded.tokenizer, dataset.seq_len, dataset.name, desc, names)

    def calibration_from_text(self, data: Any, dataset: Any, loaded: Any, progress: bool, n: int, seed: int):
        return paragraph_calibration(data, dataset, loaded, n, seed)


def paragraph_calibration(data: Any, dataset: Any, loaded: Any, n: int, seed: int):
    """Paragraphs of the text that are not evaluated, as calibration windows of a text classifier."""
    from modelxray.data.text_tasks import classification_windows

    texts = sample_passages(dataset.read_text(), n, seed, set(data.meta.get("texts", [])))
    windows = classification_windows(texts, [0] * len(texts), loaded.tokenizer, dataset.seq_len, "", "", []).windows
    return windows, "paragraphs that are not evaluated"


def label_ids(labels: list[str], model: Any, path: str) -> tuple[list[int], list]:
    """Label names mapped through the model's ``label2id`` (or class indices), checked against its
    number of labels."""
    config = getattr(model, "config", None)
    label2id = {str(k).lower(): int(v) for k, v in (getattr(config, "label2id", None) or {}).items()}
    n = num_labels(model)
    out = []
    for value in labels:
        key = value.strip().lower()
        if key in label2id:
            out.append(label2id[key])
        elif key.lstrip("-").isdigit() and 0 <= int(key) < n:
            out.append(int(key))
        else:
            known = ", ".join(sorted(label2id)[:8])
            raise ConfigError(
                "dataset.path", f"{path}: label {value!r} is neither one of the model's labels ({known}) nor 0..{n - 1}"
            )
    id2label = getattr(config, "id2label", None) or {}
    return out, [str(id2label.get(i, i)) for i in range(n)]
