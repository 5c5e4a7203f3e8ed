"""Your own recordings: a folder of PCM WAV files with a transcripts file (tsv, csv or jsonl),
checked row by row and header by header before the model loads, read as float32 mono at the model's
sampling rate."""

from __future__ import annotations

import csv
import json
import os
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

from modelxray.data.speech import Utterances, decode_wav, resample

TRANSCRIPT_NAMES = ("transcripts.tsv", "transcripts.csv", "transcripts.jsonl")
FILE_KEYS = ("file", "audio", "path")
TEXT_KEYS = ("text", "transcript", "sentence")
CONVERT = "convert it to PCM WAV, e.g. `ffmpeg -i IN -ac 1 -ar 16000 OUT.wav`"


def read_wav(path: str | Path, sample_rate: int | None = None, key: str = "dataset.path") -> np.ndarray:
    """One PCM WAV file as float32 mono in [-1, 1], resampled to ``sample_rate`` when given."""
    path = Path(path)
    try:
        audio, rate = decode_wav(str(path), path.name)
    except (wave.Error, EOFError) as exc:
        raise ConfigError(key, _not_wav(path, exc)) from None
    return resample(audio, rate, sample_rate) if sample_rate else audio


def check_wav(path: Path, key: str = "dataset.path") -> None:
    """A PCM WAV of samples ``decode_wav`` reads, holding at least one frame: its header and first
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
    fmt = "MP3" if head[:3] == b"ID3" or head[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2") else None
    fmt = fmt or {b"fLaC": "FLAC", b"OggS": "Ogg"}.get(head)
    what = f"is {fmt}, not PCM WAV" if fmt else f"is not a PCM WAV file ({exc})"
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
