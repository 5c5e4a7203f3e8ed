"""Sentences picked from a text and spoken by the local ``espeak-ng`` synthesizer, and single words
spoken at several paces (keyword spotting): speech with known words, made offline.

Synthesized clips are cached as ``.npy`` files keyed by the voice, the speed, the rate, the
sentence and the espeak-ng version, so a repeated run reads the same audio instead of re-speaking.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import random
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from modelxray.core.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

from modelxray.data.speech import Utterances, decode_wav, resample

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
    audio, rate = decode_wav(io.BytesIO(proc.stdout), "espeak-ng output")
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
