"""Whisper-style speech recognisers: an encoder over the audio's features and a decoder that writes
the transcript, teacher-forced and greedy."""

from __future__ import annotations

from typing import Any, ClassVar

from modelxray.kinds.speech import SpeechRecognizer
from modelxray.kinds.windows import decoder_start


class SpeechSeq2Seq(SpeechRecognizer):
    name: ClassVar[str] = "speech_seq2seq"
    hf_tables: ClassVar[tuple[str, ...]] = ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",)
    auto_class: ClassVar[str] = "AutoModelForSpeechSeq2Seq"
    decoder_from_labels: ClassVar[bool] = True

    def from_utterances(self, utterances: Any, loaded: Any, name: str) -> Any:
        from modelxray.data.speech_tasks import whisper_windows

        model = loaded.model
        prompt = whisper_prompt(loaded.tokenizer, decoder_start(model))
        max_target = int(getattr(model.config, "max_target_positions", 448) or 448)
        return whisper_windows(utterances, loaded.processor, loaded.tokenizer, prompt, min(max_target, 128), name)

    def calibration_from_text(self, data: Any, dataset: Any, loaded: Any, progress: bool, n: int, seed: int):
        from modelxray.data.spoken_text import spoken_sentences

        utterances = spoken_sentences(
            dataset.read_text(),
            n,
            seed=seed,
            voice=dataset.speech_voice,
            words_per_minute=dataset.speech_words_per_minute,
            sample_rate=data.meta["sample_rate"],
            cache_dir=dataset.cache_dir,
            progress=progress,
            exclude=frozenset(data.meta["references"]),
        )
        return self.from_utterances(utterances, loaded, dataset.name).windows, "other sentences spoken by espeak-ng"


def whisper_prompt(tokenizer: Any, prompt: list[int]) -> list[int]:
    """Whisper's decoder prompt: start of transcript, then English, transcribe and no timestamps where
    the tokenizer knows those tokens (a real Whisper tokenizer does)."""
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    for token in ("<|en|>", "<|transcribe|>", "<|notimestamps|>"):
        if token in vocab and vocab[token] not in prompt:
            prompt = [*prompt, int(vocab[token])]
    return prompt
