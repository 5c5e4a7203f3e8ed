"""Evaluate perturbations of a speech recogniser (Whisper-style encoder-decoder or CTC) by its
transcripts: word and character error rates against the reference transcripts, each with its
standard error over utterances, and how far the transcripts moved from the clean model's
(``transcript_change``: the word error rate of the perturbed transcripts against the clean ones).

The audio families (``perturb/audio.py``) corrupt each waveform before the feature extractor, as a
noisy room or a badly cut clip would: white noise at a signal-to-noise ratio in dB, a time shift in
seconds, a change of speed. Weight and quantization noise act on the model and are scored by
``evaluate``, like every other harness."""

from __future__ import annotations

from typing import Any

import torch

from modelxray.kinds.speech_ctc import SpeechCTC
from modelxray.kinds.table import kind_of
from modelxray.measure.generation import ctc_logits, ctc_transcripts, generate_texts
from modelxray.measure.task_outputs import audio_inputs
from modelxray.metrics.text_quality import error_rate
from modelxray.perturb.audio import add_noise_at_snr, change_speed, time_shift

# family -> what its level means (the insights say it)
AUDIO_FAMILIES = {
    "audio_noise": "signal-to-noise ratio, dB",
    "time_shift": "seconds",
    "speed": "playback speed factor",
}
RANDOM_FAMILIES = ("audio_noise",)  # the others are deterministic: one pass


class SpeechHarness:
    quality = "wer"
    dropout_family = None
    substitution_family = None

    def __init__(self, model: Any, subject: Any, n: int, batch_size: int, max_new_tokens: int, progress: bool):
        data = subject.data
        self.model, self.subject, self.batch_size, self.progress = model, subject, batch_size, progress
        self.max_new_tokens = max_new_tokens
        self.audio = list(data.meta["audio"][:n])
        self.references = list(data.meta["references"][:n])
        self.rate = int(data.meta["sample_rate"])
        self.size = len(self.audio)
        self.clean_texts = self.transcribe(self.audio, "robustness: clean transcripts")
        self.clean = self.score(self.clean_texts)

    def transcribe(self, audio: list, desc: str) -> list[str]:
        """The model's greedy transcripts of ``audio`` (waveforms at the data's sample rate)."""
        s = self.subject
        batches = [
            audio_inputs(s.processor, audio[i : i + self.batch_size], self.rate)
            for i in range(0, len(audio), self.batch_size)
        ]
        if isinstance(kind_of(s), SpeechCTC):  # a character distribution per frame: its greedy transcript
            with torch.inference_mode():
                return ctc_transcripts(s.tokenizer, ctc_logits(self.model, batches))
        prompt = s.data.meta["prompt"]
        return generate_texts(self.model, s.tokenizer, batches, prompt, self.max_new_tokens, self.progress, desc)

    def score(self, texts: list[str]) -> dict[str, float]:
        """WER and CER against the references (with standard errors), and the WER against the clean
        model's transcripts."""
        out = {**error_rate(self.references, texts), **error_rate(self.references, texts, "char")}
        if hasattr(self, "clean_texts"):
            change = error_rate(self.clean_texts, texts)
            out["transcript_change"], out["transcript_change_se"] = change["wer"], change["wer_se"]
        out["utterances_scored"] = float(len(texts))
        return out

    def clean_of(self, n: int) -> dict[str, float]:
        return self.clean

    def evaluate(self, desc: str) -> dict[str, float]:
        """The model as it is now (after weight noise) on the clean audio."""
        return self.score(self.transcribe(self.audio, desc))

    def perturb_inputs(self, family: str, level: float, generator: torch.Generator, desc: str) -> dict[str, float]:
        """Transcripts of every clip corrupted by ``family`` at ``level``."""
        if family == "audio_noise":
            audio = [add_noise_at_snr(a, level, generator) for a in self.audio]
        elif family == "time_shift":
            audio = [time_shift(a, level, self.rate) for a in self.audio]
        elif family == "speed":
            audio = [change_speed(a, level) for a in self.audio]
        else:  # pragma: no cover - the analyzer only asks for AUDIO_FAMILIES
            raise ValueError(f"unknown audio family {family!r}")
        return self.score(self.transcribe(audio, desc))
