"""Audio classifiers (Audio Spectrogram Transformer, Wav2Vec2 / HuBERT / WavLM sequence classifiers,
Whisper's audio classifier): a label per clip, scored by accuracy.

A text dataset becomes spoken words, one class per label: the model's own label names where they are
words (a keyword spotter's ``yes``, ``no``, ``up`` ...), else the text's most frequent words, each
spoken by espeak-ng at a seeded speed; ``audio_folder`` gives the user's clips, each transcript naming
its label."""

from __future__ import annotations

from typing import Any, ClassVar

from modelxray.core.errors import ConfigError
from modelxray.kinds.sequence_classification import label_ids
from modelxray.kinds.windows import WindowsKind, num_labels


class AudioClassifier(WindowsKind):
    name: ClassVar[str] = "audio_classification"
    task: ClassVar[str] = "audio_classification"
    noun: ClassVar[str] = "audio classifier"
    models: ClassVar[str] = (
        "`hf` with an audio classification config (Audio Spectrogram Transformer, Wav2Vec2 / HuBERT / WavLM "
        "`...ForSequenceClassification`, `WhisperForAudioClassification`) and its feature extractor"
    )
    datasets: ClassVar[str] = (
        "any text dataset: words spoken by espeak-ng, one class per label (the model's label names where they are "
        "words, else the text's most frequent words); `audio_folder` (your WAVs, each transcript naming its label)"
    )
    quality: ClassVar[str] = "accuracy with a 95% Wilson interval, loss"
    hf_tables: ClassVar[tuple[str, ...]] = ("MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",)
    auto_class: ClassVar[str] = "AutoModelForAudioClassification"
    modalities: ClassVar[tuple[str, ...]] = ("text", "audio")
    fitting: ClassVar[str] = "a text dataset (spoken words, labelled by the word) or dataset=audio_folder"
    headline: ClassVar[str] = "accuracy"
    needs_processor: ClassVar[str | None] = "feature extractor"
    needs_tokenizer: ClassVar[bool] = False  # audio in, a label out: no text is tokenized
    scored_by: ClassVar[str] = "label"
    perplexity_name: ClassVar[str] = "label perplexity"
    counted_in: ClassVar[str] = "clips"
    cannot: ClassVar[dict[str, str]] = {
        "robustness": "its inputs are audio: analyzer=robustness perturbs token embeddings, pixels and "
        "transcribed speech, not clips scored by label yet; weight noise runs through analyzer=quant_impact"
    }
    words_per_minute: ClassVar[tuple[int, ...]] = (130, 160, 190)  # each clip's speed, seeded: one voice, three paces

    def from_text(self, dataset: Any, loaded: Any, progress: bool) -> Any:
        from modelxray.data.spoken_text import spoken_words

        words = class_words(loaded.model, dataset.read_text())
        rate = int(getattr(loaded.processor, "sampling_rate", 16000) or 16000)
        utterances = spoken_words(
            words,
            dataset.examples,
            seed=dataset.task_seed,
            voice=dataset.speech_voice,
            paces=self.words_per_minute,
            sample_rate=rate,
            cache_dir=dataset.cache_dir,
            name=f"{dataset.name} words",
            progress=progress,
        )
        labels = [words.index(w) for w in utterances.transcripts]
        return self.from_clips(utterances, labels, loaded, f"{dataset.name} (words spoken by espeak-ng)")

    def from_dataset(self, dataset: Any, loaded: Any) -> Any:
        from modelxray.data.audio_folder import AudioFolder

        if not isinstance(dataset, AudioFolder):
            return None
        rate = getattr(loaded.processor, "sampling_rate", None)
        utterances = dataset.load_utterances(rate)
        labels, _ = label_ids(utterances.transcripts, loaded.model, dataset.path)
        return self.from_clips(utterances, labels, loaded, dataset.name)

    def from_clips(self, utterances: Any, labels: list[int], loaded: Any, name: str) -> Any:
        from modelxray.data.speech_tasks import labelled_clips

        names = [str(n) for n in label_names(loaded.model)]
        return labelled_clips(utterances, labels, loaded.processor, names, name, self.task)

    def calibration_from_text(self, data: Any, dataset: Any, loaded: Any, progress: bool, n: int, seed: int):
        from modelxray.data.spoken_text import spoken_words

        words = class_words(loaded.model, dataset.read_text())
        rate = int(data.meta["sample_rate"])
        utterances = spoken_words(
            words,
            n,
            seed=seed,
            voice=dataset.speech_voice,
            paces=self.words_per_minute,
            sample_rate=rate,
            cache_dir=dataset.cache_dir,
            progress=progress,
        )
        labels = [words.index(w) for w in utterances.transcripts]
        return self.from_clips(utterances, labels, loaded, dataset.name).windows, "other spoken words (seeded)"


def label_names(model: Any) -> list:
    """The model's label names, in id order (its ids where its config names none)."""
    config = getattr(model, "config", None)
    id2label = getattr(config, "id2label", None) or {}
    return [id2label.get(i, i) for i in range(num_labels(model))]


def class_words(model: Any, text: str) -> list[str]:
    """The word each label is spoken as: the model's label names when every one is a word, else the
    text's most frequent words of three letters or more (one per label, most frequent first)."""
    import re
    from collections import Counter

    names = [str(n) for n in label_names(model)]
    if all(re.fullmatch(r"[A-Za-z]+", n) for n in names):  # not transformers' LABEL_0, LABEL_1 ...
        return [n.lower() for n in names]
    counts = Counter(w.lower() for w in re.findall(r"\b[A-Za-z]{3,}\b", text))
    words = [w for w, _ in counts.most_common(len(names))]
    if len(words) < len(names):
        raise ConfigError(
            "dataset", f"the text holds {len(words)} distinct words, fewer than the model's {len(names)} labels"
        )
    return words
