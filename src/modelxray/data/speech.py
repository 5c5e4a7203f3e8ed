"""Speech for speech-recognition and audio-classification models (Whisper, Wav2Vec2) without a
download: clips with the words each one says, at the model's sampling rate. They come from
``data.spoken_text`` (sentences of a text spoken by the local ``espeak-ng``) or ``data.audio_folder``
(your own WAV files with a transcripts file); either way the audio is float32 mono in [-1, 1], so a
run can score word error rates offline."""

from __future__ import annotations

import math
import wave
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


@dataclass
class Utterances:
    """Spoken clips and what each one says, in the same order."""

    name: str
    audio: list[np.ndarray]  # float32 mono in [-1, 1] at sample_rate, one array per clip
    transcripts: list[str]
    sample_rate: int = 16000
    source: str = ""  # one line: where the clips came from
    meta: dict = field(default_factory=dict)

    @property
    def n_examples(self) -> int:
        return len(self.audio)

    def seconds(self) -> float:
        """Total audio length in seconds."""
        return sum(len(a) for a in self.audio) / self.sample_rate


def resample(audio: np.ndarray, rate: int, sample_rate: int) -> np.ndarray:
    """``audio`` from ``rate`` to ``sample_rate`` Hz (polyphase, float32, overshoot clipped to [-1, 1])."""
    import numpy as np

    if rate == sample_rate or audio.size == 0:
        return audio.astype(np.float32, copy=False)
    from scipy.signal import resample_poly

    g = math.gcd(rate, sample_rate)
    return np.clip(resample_poly(audio, sample_rate // g, rate // g), -1.0, 1.0).astype(np.float32)


def decode_wav(source, shown: str) -> tuple[np.ndarray, int]:
    """A PCM WAV (8, 16, 24 or 32 bit, any channel count) as float32 mono in [-1, 1] and its rate."""
    import numpy as np

    with wave.open(source, "rb") as w:
        channels, width, rate = w.getnchannels(), w.getsampwidth(), w.getframerate()
        # espeak-ng writes a streaming header whose frame count is a placeholder: read what is there
        data = w.readframes(w.getnframes())
    frame = channels * width
    data = data[: len(data) // frame * frame]
    if width == 1:
        x = (np.frombuffer(data, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        x = np.frombuffer(data, "<i2").astype(np.float32) / 32768.0
    elif width == 3:
        b = np.frombuffer(data, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        x = (np.where(v >= 1 << 23, v - (1 << 24), v) / float(1 << 23)).astype(np.float32)
    elif width == 4:
        x = (np.frombuffer(data, "<i4").astype(np.float64) / 2147483648.0).astype(np.float32)
    else:
        raise wave.Error(f"{shown} has {8 * width}-bit samples")
    if channels > 1:
        x = x.reshape(-1, channels).mean(axis=1, dtype=np.float32)
    return x, rate
