"""Speech for speech-recognition models (Whisper, Wav2Vec2) without a download: sentences picked from
a text and spoken by the local ``espeak-ng`` synthesizer, or your own folder of WAV files with a
transcripts file. Either way the audio is float32 mono in [-1, 1] at the model's sampling rate and
each clip comes with the words it says, so a run can score word error rates offline.

Synthesized clips are cached as ``.npy`` files keyed by the voice, the speed, the rate, the
sentence and the espeak-ng version, so a repeated run reads the same audio instead of re-speaking.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import math
import os
import random
import re
import shutil
import subprocess
import tempfile
import wave
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from modelxray.core.configurable import Configurable
from modelxray.core.errors import ConfigError
from modelxray.core.schema import REQUIRED
from modelxray.data.source_checks import KindsThatRead

if TYPE_CHECKING:
    import numpy as np

TRANSCRIPT_NAMES = ("transcripts.tsv", "transcripts.csv", "transcripts.jsonl")
FILE_KEYS = ("file", "audio", "path")
TEXT_KEYS = ("text", "transcript", "sentence")
CONVERT = "convert it to PCM WAV, e.g. `ffmpeg -i IN -ac 1 -ar 16000 OUT.wav`"


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


# --- sentences from a text -------------------------------------------------------------------------

# A sentence of plain words: starts with a capital, ends with . ! or ?, only letters, apostrophes and
# commas between (no digits, no code symbols), so a recognizer's words can be compared with it.
_PLAIN = re.compile(r"[A-Z][A-Za-z',]*(?: [A-Za-z',]+)*[.!?]")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _blocks(text: str) -> list[str]:
    """Runs of consecutive lines with the same indentation, each joined into one line. A blank line
    or a change of indentation (a heading, a list item, a code block) breaks a sentence; a line
    wrapped at the same indentation does not."""
    blocks: list[str] = []
    current: list[str] = []
    indent = None
    for line in text.splitlines():
        stripped = line.strip()
        this = len(line) - len(line.lstrip())
        if not stripped or this != indent:
            if current:
                blocks.append(" ".join(current))
            current = []
            indent = this if stripped else None
        if stripped:
            current.append(stripped)
    if current:
        blocks.append(" ".join(current))
    return blocks


def usable_sentences(text: str, min_words: int = 4, max_words: int = 12) -> list[str]:
    """Every distinct plain-word sentence of ``text`` with ``min_words`` to ``max_words`` words, in text
    order (typographic apostrophes written as ``'``, inner whitespace as one space)."""
    found: dict[str, None] = {}
    for block in _blocks(text.replace("\u2019", "'")):
        for sentence in _SENTENCE_END.split(block):
            sentence = " ".join(sentence.split())
            if _PLAIN.fullmatch(sentence) and min_words <= len(sentence.split()) <= max_words:
                found.setdefault(sentence, None)
    return list(found)


def pick_sentences(
    text: str, n: int, seed: int = 0, min_words: int = 4, max_words: int = 12, exclude: frozenset[str] = frozenset()
) -> list[str]:
    """``n`` plain-word sentences of ``text`` (none in ``exclude``), a seeded sample kept in text
    order, so a seed names the same sentences on every machine."""
    usable = [s for s in usable_sentences(text, min_words, max_words) if s not in exclude]
    if len(usable) < n:
        raise ConfigError(
            "dataset",
            f"the text has {len(usable)} usable sentence(s) ({min_words} to {max_words} plain words each), "
            f"fewer than the {n} asked for: ask for fewer examples or give a longer text",
        )
    chosen = sorted(random.Random(seed).sample(range(len(usable)), n))
    return [usable[i] for i in chosen]


# --- espeak-ng -------------------------------------------------------------------------------------


def _espeak() -> str:
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise ConfigError(
            "dataset",
            "speech from text needs espeak-ng (apt-get install espeak-ng), which is not on PATH; "
            "or give your own recordings: a folder of WAV files with a transcripts file",
        )
    return exe


@functools.cache
def espeak_version(exe: str) -> str:
    """The version line of the espeak-ng at ``exe``, read once per process (part of the cache key:
    another version speaks differently)."""
    proc = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    return proc.stdout.strip().split("  Data at:")[0] or proc.stderr.strip()


def _cache_path(
    cache_dir: str | Path, voice: str, words_per_minute: int, sample_rate: int, sentence: str, version: str
) -> Path:
    key = json.dumps([voice, words_per_minute, sample_rate, sentence, version], ensure_ascii=False)
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
    return Path(os.path.expanduser(str(cache_dir))) / "speech" / f"{digest}.npy"


def synthesize(
    sentence: str,
    voice: str = "en",
    words_per_minute: int = 160,
    sample_rate: int = 16000,
    cache_dir: str | Path = "~/.cache/modelxray",
) -> np.ndarray:
    """``sentence`` spoken by espeak-ng, float32 mono in [-1, 1] at ``sample_rate`` (read from the
    cache when the same voice, speed, rate, sentence and espeak-ng version were spoken before)."""
    import numpy as np

    exe = _espeak()
    version = espeak_version(exe)
    path = _cache_path(cache_dir, voice, words_per_minute, sample_rate, sentence, version)
    if path.is_file():
        try:
            return np.load(path).astype(np.float32, copy=False)
        except (OSError, ValueError):
            pass  # a damaged cache file: speak it again
    # a leading "-" would read as an option; espeak-ng skips the leading space
    text = " " + sentence if sentence.startswith("-") else sentence
    try:
        proc = subprocess.run(
            [exe, "-v", voice, "-s", str(words_per_minute), "--stdout", text], capture_output=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"espeak-ng took over 60 s to speak {sentence[:60]!r}") from None
    if proc.returncode != 0:
        why = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ConfigError(
            "dataset",
            f"espeak-ng failed with voice {voice!r} ({why[0] if why else f'exit code {proc.returncode}'}); "
            "pick a voice listed by `espeak-ng --voices`",
        )
    audio, rate = _decode_wav(io.BytesIO(proc.stdout), "espeak-ng output")
    audio = resample(audio, rate, sample_rate)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npy.tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, audio)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return audio


def spoken_sentences(
    text: str,
    n: int,
    seed: int = 0,
    voice: str = "en",
    words_per_minute: int = 160,
    sample_rate: int = 16000,
    cache_dir: str | Path = "~/.cache/modelxray",
    name: str = "spoken text",
    progress: bool = False,
    exclude: frozenset[str] = frozenset(),
) -> Utterances:
    """``n`` sentences of ``text`` (``pick_sentences``, none in ``exclude``) and their espeak-ng audio;
    the transcripts are the sentences as written."""
    from modelxray.core.progress import bar

    sentences = pick_sentences(text, n, seed=seed, exclude=exclude)
    audio = [
        synthesize(s, voice, words_per_minute, sample_rate, cache_dir)
        for s in bar(sentences, desc="speaking sentences", enabled=progress)
    ]
    version = espeak_version(_espeak())
    return Utterances(
        name=name,
        audio=audio,
        transcripts=list(sentences),
        sample_rate=sample_rate,
        source=f"{n} sentences of {name} (seed {seed}) spoken by {version}, voice {voice}, {words_per_minute} wpm",
        meta={"voice": voice, "words_per_minute": words_per_minute, "seed": seed, "synthesizer": version},
    )


def spoken_words(
    words: list[str],
    n: int,
    seed: int = 0,
    voice: str = "en",
    paces: tuple[int, ...] = (160,),
    sample_rate: int = 16000,
    cache_dir: str | Path = "~/.cache/modelxray",
    name: str = "spoken words",
    progress: bool = False,
) -> Utterances:
    """``n`` clips of single ``words`` (each word in turn, so every class is heard, at a seeded pace of
    ``paces`` words per minute) spoken by espeak-ng; each clip's transcript is its word."""
    import random

    from modelxray.core.progress import bar

    rng = random.Random(seed)
    said = [(words[i % len(words)], rng.choice(paces)) for i in range(n)]
    audio = [
        synthesize(word, voice, pace, sample_rate, cache_dir)
        for word, pace in bar(said, desc="speaking words", enabled=progress)
    ]
    version = espeak_version(_espeak())
    paced = "/".join(map(str, paces))
    return Utterances(
        name=name,
        audio=audio,
        transcripts=[w for w, _ in said],
        sample_rate=sample_rate,
        source=f"{n} clips of {len(words)} words (seed {seed}) spoken by {version}, voice {voice}, {paced} wpm",
        meta={"voice": voice, "paces": list(paces), "seed": seed, "synthesizer": version},
    )


# --- WAV files -------------------------------------------------------------------------------------


def resample(audio: np.ndarray, rate: int, sample_rate: int) -> np.ndarray:
    """``audio`` from ``rate`` to ``sample_rate`` Hz (polyphase, float32, overshoot clipped to [-1, 1])."""
    import numpy as np

    if rate == sample_rate or audio.size == 0:
        return audio.astype(np.float32, copy=False)
    from scipy.signal import resample_poly

    g = math.gcd(rate, sample_rate)
    return np.clip(resample_poly(audio, sample_rate // g, rate // g), -1.0, 1.0).astype(np.float32)


def _decode_wav(source, shown: str) -> tuple[np.ndarray, int]:
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


def read_wav(path: str | Path, sample_rate: int | None = None, key: str = "dataset.path") -> np.ndarray:
    """One PCM WAV file as float32 mono in [-1, 1], resampled to ``sample_rate`` when given."""
    path = Path(path)
    try:
        audio, rate = _decode_wav(str(path), path.name)
    except (wave.Error, EOFError) as exc:
        raise ConfigError(key, _not_wav(path, exc)) from None
    return resample(audio, rate, sample_rate) if sample_rate else audio


def check_wav(path: Path, key: str = "dataset.path") -> None:
    """A PCM WAV of samples ``_decode_wav`` reads, holding at least one frame: its header and first
    frame read, no more (the whole clip is decoded once the model's sampling rate is known)."""
    try:
        with wave.open(str(path), "rb") as w:
            width, first = w.getsampwidth(), w.readframes(1)
    except (wave.Error, EOFError) as exc:
        raise ConfigError(key, _not_wav(path, exc)) from None
    if width not in (1, 2, 3, 4):
        raise ConfigError(key, _not_wav(path, wave.Error(f"{8 * width}-bit samples")))
    if not first:
        raise ConfigError(key, f"{path} holds no audio (a WAV of 0 samples): record it again or leave it out")


def _not_wav(path: Path, exc: Exception) -> str:
    """What ``path`` is instead of a PCM WAV (MP3, FLAC, Ogg by their first bytes), and how to convert it."""
    with open(path, "rb") as f:
        head = f.read(4)
    kind = "MP3" if head[:3] == b"ID3" or head[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2") else None
    kind = kind or {b"fLaC": "FLAC", b"OggS": "Ogg"}.get(head) or "not PCM WAV"
    what = f"is {kind}, not PCM WAV" if kind != "not PCM WAV" else f"is not a PCM WAV file ({exc})"
    return f"{path} {what}: {CONVERT}"


def _find_transcripts(folder: Path, transcripts: str | None, key: str) -> Path:
    if transcripts is not None:
        path = Path(os.path.expanduser(transcripts))
        if not path.is_file():
            raise ConfigError(key, f"file {transcripts!r} does not exist: give the transcripts file of {folder}")
        return path
    for name in TRANSCRIPT_NAMES:
        if (folder / name).is_file():
            return folder / name
    raise ConfigError(
        key,
        f"no transcripts file in {folder} (looked for {', '.join(TRANSCRIPT_NAMES)}): write one with a "
        "`filename<TAB>transcript` line per clip, or set dataset.transcripts",
    )


def _resolve(folder: Path, name: str) -> Path:
    p = Path(os.path.expanduser(name))
    return p if p.is_absolute() else folder / p


def _transcript_rows(folder: Path, path: Path, key: str) -> list[tuple[str, str, int]]:
    """(file name, transcript, line number) per row of a TSV, CSV or JSONL transcripts file."""
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as exc:
        raise ConfigError(key, f"{path} is not UTF-8 text ({exc.reason}): save it as UTF-8") from None
    rows: list[tuple[str, str, int]] = []
    jsonl = path.suffix.lower() in (".jsonl", ".json")
    first = True
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        header_allowed, first = first, False
        if jsonl:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(key, f"line {number} of {path} is not JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise ConfigError(
                    key, f"line {number} of {path} is not a JSON object: write {{'file': ..., 'text': ...}}"
                )
            name = next((obj[k] for k in FILE_KEYS if k in obj), None)
            text = next((obj[k] for k in TEXT_KEYS if k in obj), None)
            if not isinstance(name, str) or not isinstance(text, str):
                raise ConfigError(
                    key,
                    f"line {number} of {path} needs a file name ({'/'.join(FILE_KEYS)}) and a transcript "
                    f"({'/'.join(TEXT_KEYS)}) as strings, got keys {sorted(obj)}",
                )
        else:
            if path.suffix.lower() == ".csv":
                fields = next(csv.reader([line]))
                name, text = (fields[0], ",".join(fields[1:])) if len(fields) > 1 else (line, None)
            else:
                sep = "\t" if "\t" in line else ","
                name, found, text = line.partition(sep)
                text = text if found else None
            name = name.strip()
            if header_allowed and not Path(name).suffix and not _resolve(folder, name).is_file():
                continue  # a header line (file<TAB>text, path,transcript, ...)
            if text is None:
                raise ConfigError(key, f"line {number} of {path} has no transcript: write `filename<TAB>transcript`")
        name, text = name.strip(), " ".join(text.split())
        if not text:
            raise ConfigError(key, f"line {number} of {path} has an empty transcript for {name!r}")
        rows.append((name, text, number))
    return rows


def read_audio_folder(
    path: str, transcripts: str | None = None, sample_rate: int = 16000, max_examples: int | None = None
) -> Utterances:
    """Your recordings: the ``.wav`` files of ``path`` named in its transcripts file (``transcripts.tsv``,
    ``.csv`` or ``.jsonl`` in the folder unless ``transcripts`` names one), in that file's order."""
    folder, table, rows = listed_clips(path, transcripts, max_examples)
    audio = [read_wav(_resolve(folder, name), sample_rate) for name, _, _ in rows]
    return Utterances(
        name=f"audio_folder:{folder.name}",
        audio=audio,
        transcripts=[text for _, text, _ in rows],
        sample_rate=sample_rate,
        source=f"{len(rows)} WAV file(s) in {folder} with transcripts from {table.name}",
        meta={"files": [name for name, _, _ in rows], "transcripts_file": str(table)},
    )


def check_audio_folder(path: str, transcripts: str | None = None, max_examples: int | None = None) -> None:
    """Every row of the transcripts file and the header and first frame of each clip it names: what
    ``read_audio_folder`` would refuse, found without decoding the audio."""
    folder, _, rows = listed_clips(path, transcripts, max_examples)
    for name, _, _ in rows:
        check_wav(_resolve(folder, name))


def listed_clips(
    path: str, transcripts: str | None, max_examples: int | None
) -> tuple[Path, Path, list[tuple[str, str, int]]]:
    """(folder, transcripts file, its first ``max_examples`` rows), each row's file there."""
    folder = Path(os.path.expanduser(path))
    if not folder.is_dir():
        raise ConfigError("dataset.path", f"folder {path!r} does not exist: give a folder of .wav files")
    table = _find_transcripts(folder, transcripts, "dataset.transcripts")
    rows = _transcript_rows(folder, table, "dataset.transcripts")
    if not rows:
        raise ConfigError(
            "dataset.transcripts", f"{table} has no usable rows: write a `filename<TAB>transcript` line per clip"
        )
    for name, _, number in rows:
        if not _resolve(folder, name).is_file():
            raise ConfigError(
                "dataset.transcripts",
                f"line {number} of {table} names {name!r}, which is not in {folder}: fix the name or add the file",
            )
    return folder, table, rows[:max_examples] if max_examples is not None else rows


@dataclass
class AudioFolder(KindsThatRead, Configurable):
    modality: ClassVar[str] = "audio"  # what its examples are: a model of another kind cannot use them
    kinds: ClassVar[tuple[str, ...]] = ("speech_ctc", "speech_seq2seq", "audio_classification")
    holds: ClassVar[str] = "recordings with their transcripts"
    path: str = field(default="", metadata=REQUIRED)  # a folder of .wav files with a transcripts.tsv/.csv/.jsonl
    transcripts: str | None = None  # the transcripts file (null = transcripts.tsv, .csv or .jsonl in path)
    sample_rate: int = 16000  # clips are resampled to this rate (the model's feature extractor rate wins)
    max_examples: int | None = None  # the first N clips in transcripts order (null = all)

    def validate(self) -> None:
        if not self.path:
            raise ConfigError("path", "is required: a folder of .wav files with a transcripts.tsv")
        self.require_positive("sample_rate")
        self.require_positive("max_examples", allow_none=True)
        folder = Path(os.path.expanduser(self.path))
        if not folder.is_dir():
            raise ConfigError("path", f"folder {self.path!r} does not exist: give a folder of .wav files")
        _find_transcripts(folder, self.transcripts, "transcripts")

    @property
    def name(self) -> str:
        return f"audio_folder:{Path(self.path).name}"

    def check_source(self) -> None:
        """The transcripts file and each clip's header, before the model loads: a bad row or a file
        that is no PCM WAV is one line, not an error once the weights are in memory."""
        check_audio_folder(self.path, self.transcripts, self.max_examples)

    def load_utterances(self, sample_rate: int | None = None) -> Utterances:
        """The clips at ``sample_rate`` (the model's feature extractor rate) or else the configured one."""
        return read_audio_folder(self.path, self.transcripts, sample_rate or self.sample_rate, self.max_examples)
