"""Speech recognisers: audio in, text out, scored by word error rate. A text dataset is spoken by
espeak-ng; ``audio_folder`` holds the user's own WAVs and transcripts."""

from __future__ import annotations

from typing import Any, ClassVar

from modelxray.kinds.windows import WindowsKind


class SpeechRecognizer(WindowsKind):
    task: ClassVar[str] = "speech_recognition"
    noun: ClassVar[str] = "speech recogniser"
    models: ClassVar[str] = (
        "`hf` with Whisper-style (`...ForConditionalGeneration` of a speech seq2seq) or CTC (Wav2Vec2, HuBERT) configs"
    )
    datasets: ClassVar[str] = (
        "any text dataset: sentences spoken by espeak-ng (`dataset.speech_voice`, `dataset.speech_words_per_minute`); "
        "`audio_folder` (your WAVs and transcripts)"
    )
    quality: ClassVar[str] = (
        "word and character error rates (jiwer) of greedy transcripts, standard errors with utterances as units; "
        "Whisper also teacher-forced transcript loss"
    )
    modalities: ClassVar[tuple[str, ...]] = ("text", "audio")
    fitting: ClassVar[str] = "a text dataset (sentences spoken by espeak-ng) or dataset=audio_folder"
    headline: ClassVar[str] = "wer"
    perplexity_name: ClassVar[str] = "transcript perplexity (teacher-forced)"
    counted_in: ClassVar[str] = "utterances"
    needs_processor: ClassVar[str | None] = "feature extractor"

    def degenerate_signs(self, metrics: dict, subject: Any, uniform_share: float) -> list[str]:
        """Transcripts that share (next to) no word with the references: a word error rate of 1 or more."""
        from modelxray.metrics.degenerate import transcript_signs

        return transcript_signs(metrics["wer"]) if "wer" in metrics else []

    def from_text(self, dataset: Any, loaded: Any, progress: bool) -> Any:
        from modelxray.data.spoken_text import spoken_sentences

        rate = int(getattr(loaded.processor, "sampling_rate", 16000) or 16000)
        utterances = spoken_sentences(
            dataset.read_text(),
            dataset.examples,
            seed=dataset.task_seed,
            voice=dataset.speech_voice,
            words_per_minute=dataset.speech_words_per_minute,
            sample_rate=rate,
            cache_dir=dataset.cache_dir,
            name=f"{dataset.name} spoken",
            progress=progress,
        )
        return self.from_utterances(utterances, loaded, f"{dataset.name} (spoken by espeak-ng)")

    def from_dataset(self, dataset: Any, loaded: Any) -> Any:
        from modelxray.data.audio_folder import AudioFolder

        if not isinstance(dataset, AudioFolder):
            return None
        rate = getattr(loaded.processor, "sampling_rate", None)
        return self.from_utterances(dataset.load_utterances(rate), loaded, dataset.name)

    def from_utterances(self, utterances: Any, loaded: Any, name: str) -> Any:
        """Spoken utterances as this recogniser's examples."""
        raise NotImplementedError
