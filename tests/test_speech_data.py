"""Offline speech data (sentences spoken by espeak-ng, a folder of WAV files) and audio perturbations."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import wave
from pathlib import Path

import numpy as np
import pytest
import torch

from modelxray.core.errors import ConfigError
from modelxray.data.audio_folder import AudioFolder, read_audio_folder
from modelxray.data.speech import Utterances
from modelxray.data.spoken_text import pick_sentences, spoken_sentences, synthesize, usable_sentences
from modelxray.perturb.audio import add_noise_at_snr, change_speed, time_shift

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")


@pytest.fixture(scope="module")
def pydoc_text() -> str:
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))


def write_wav(path: Path, audio: np.ndarray, rate: int = 16000, width: int = 2, channels: int = 1) -> None:
    """``audio`` (float in [-1, 1], shape (n,) or (n, channels)) as a PCM WAV of ``width`` bytes per sample."""
    x = np.clip(np.asarray(audio, dtype=np.float64), -1, 1)
    if width == 1:
        data = np.round(x * 127 + 128).astype(np.uint8).tobytes()
    elif width == 2:
        data = np.round(x * 32767).astype("<i2").tobytes()
    else:
        data = np.round(x * 2147483647).astype("<i4").tobytes()
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(data)


def tone(seconds: float, rate: int, freq: float = 440.0, amp: float = 0.5) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return amp * np.sin(2 * np.pi * freq * t)


# --- sentences ---------------------------------------------------------------------------------------


def test_pick_sentences_is_deterministic_and_plain(pydoc_text):
    assert len(usable_sentences(pydoc_text)) >= 64
    a = pick_sentences(pydoc_text, 64, seed=0)
    assert a == pick_sentences(pydoc_text, 64, seed=0)
    assert a != pick_sentences(pydoc_text, 64, seed=1)
    assert len(set(a)) == 64
    flat = " ".join(pydoc_text.replace("\u2019", "'").split())
    assert all(s in flat for s in a)  # sentences as written (line wraps joined)
    for s in a:
        assert 4 <= len(s.split()) <= 12
        assert not any(c.isdigit() or c in '()[]{}=_<>/\\*#@`|"' for c in s), s
    usable = usable_sentences(pydoc_text)
    assert [usable.index(s) for s in a] == sorted(usable.index(s) for s in a)  # text order


def test_pick_sentences_filters_and_refuses_short_text():
    text = (
        "The cat sat on the mat.  Call f(x) = 3 to get a value.\nThis line has 2 digits in it.\n"
        "Short one.\nA plain sentence, with a comma, is kept here!\nThe cat sat on the mat.\n\n"
        "    x = [1, 2]\nIs this a question worth asking?"
    )
    assert usable_sentences(text) == [
        "The cat sat on the mat.",
        "A plain sentence, with a comma, is kept here!",
        "Is this a question worth asking?",
    ]
    assert pick_sentences(text, 3) == usable_sentences(text)
    with pytest.raises(ConfigError, match=r"^dataset: the text has 3 usable sentence.*fewer examples"):
        pick_sentences(text, 4)


# --- espeak-ng ---------------------------------------------------------------------------------------


@needs_espeak
def test_synthesize_speaks_and_caches(tmp_path, monkeypatch):
    audio = synthesize("The quick brown fox jumps.", cache_dir=tmp_path)
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert 0.3 <= len(audio) / 16000 <= 10
    assert np.abs(audio).max() <= 1.0 and np.sqrt(np.mean(audio**2)) > 0.01
    cached = list((tmp_path / "speech").glob("*.npy"))
    assert len(cached) == 1 and len(cached[0].stem) == 64

    def boom(*args, **kwargs):
        raise AssertionError("espeak-ng ran for a cached sentence")

    monkeypatch.setattr(subprocess, "run", boom)
    again = synthesize("The quick brown fox jumps.", cache_dir=tmp_path)
    np.testing.assert_array_equal(again, audio)
    with pytest.raises(AssertionError, match="espeak-ng ran"):  # another rate is another clip
        synthesize("The quick brown fox jumps.", sample_rate=8000, cache_dir=tmp_path)


def test_synthesize_without_espeak(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match=r"^dataset: speech from text needs espeak-ng \(apt-get install espeak-ng\)"):
        synthesize("The quick brown fox jumps.", cache_dir=tmp_path)


@needs_espeak
def test_spoken_sentences(pydoc_text, tmp_path):
    u = spoken_sentences(pydoc_text, 3, seed=2, cache_dir=tmp_path, name="pydoc")
    assert isinstance(u, Utterances) and u.n_examples == 3 and u.sample_rate == 16000
    assert u.transcripts == pick_sentences(pydoc_text, 3, seed=2)
    assert all(a.dtype == np.float32 and len(a) > 16000 * 0.3 for a in u.audio)
    assert u.seconds() == pytest.approx(sum(len(a) for a in u.audio) / 16000)
    assert "espeak" in u.source.lower() and "\n" not in u.source


# --- a folder of WAV files ---------------------------------------------------------------------------


@pytest.fixture
def folder(tmp_path) -> Path:
    d = tmp_path / "clips"
    d.mkdir()
    write_wav(d / "a.wav", tone(0.5, 16000))
    write_wav(d / "b.wav", tone(0.25, 8000), rate=8000)
    stereo = np.stack([tone(0.2, 16000), tone(0.2, 16000, amp=0.25)], axis=1)
    write_wav(d / "c.wav", stereo.reshape(-1), channels=2)
    write_wav(d / "d.wav", tone(0.1, 16000), width=1)
    write_wav(d / "e.wav", tone(0.1, 16000), width=4)
    return d


def test_read_audio_folder_tsv(folder):
    (folder / "transcripts.tsv").write_text(
        "file\ttext\nb.wav\thello  there\na.wav\tgood morning\nc.wav\tleft and right\n"
        "d.wav\teight bits\ne.wav\tthirty two bits\n"
    )
    u = read_audio_folder(str(folder))
    assert u.transcripts == ["hello there", "good morning", "left and right", "eight bits", "thirty two bits"]
    assert u.meta["files"] == ["b.wav", "a.wav", "c.wav", "d.wav", "e.wav"]
    b, a, c, d, e = u.audio
    assert all(x.dtype == np.float32 and x.ndim == 1 for x in u.audio)
    assert len(b) == 2 * 2000  # 8 kHz -> 16 kHz doubles the samples
    assert len(a) == 8000
    np.testing.assert_allclose(a, tone(0.5, 16000), atol=1e-4)
    np.testing.assert_allclose(c, 0.75 * tone(0.2, 16000), atol=1e-4)  # channels averaged
    np.testing.assert_allclose(d, tone(0.1, 16000), atol=1e-2)
    np.testing.assert_allclose(e, tone(0.1, 16000), atol=1e-6)
    assert read_audio_folder(str(folder), max_examples=2).transcripts == ["hello there", "good morning"]
    assert len(read_audio_folder(str(folder), sample_rate=8000).audio[1]) == 4000


def test_read_audio_folder_jsonl_and_csv(folder, tmp_path):
    rows = [
        {"file": "a.wav", "text": "one"},
        {"audio": "b.wav", "transcript": "two"},
        {"path": "c.wav", "sentence": "3"},
    ]
    (folder / "transcripts.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert read_audio_folder(str(folder)).transcripts == ["one", "two", "3"]
    other = tmp_path / "labels.csv"
    other.write_text('path,transcript\nc.wav,"yes, quoted"\na.wav,plain\n')
    u = read_audio_folder(str(folder), transcripts=str(other))
    assert u.transcripts == ["yes, quoted", "plain"] and u.meta["files"] == ["c.wav", "a.wav"]


def test_read_audio_folder_bad_input(folder, tmp_path):
    with pytest.raises(ConfigError, match=r"^dataset.path: folder .* does not exist"):
        read_audio_folder(str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match=r"^dataset.transcripts: no transcripts file .*transcripts.tsv"):
        read_audio_folder(str(folder))
    with pytest.raises(ConfigError, match=r"^dataset.transcripts: file .* does not exist"):
        read_audio_folder(str(folder), transcripts=str(tmp_path / "missing.tsv"))
    table = folder / "transcripts.tsv"
    table.write_text("a.wav\tfine\nzzz.wav\tgone\n")
    with pytest.raises(ConfigError, match=r"^dataset.transcripts: line 2 of .* names 'zzz.wav'"):
        read_audio_folder(str(folder))
    table.write_text("file\ttext\n\n")
    with pytest.raises(ConfigError, match=r"^dataset.transcripts: .* has no usable rows"):
        read_audio_folder(str(folder))
    table.write_text("a.wav\n")
    with pytest.raises(ConfigError, match=r"^dataset.transcripts: line 1 .* has no transcript"):
        read_audio_folder(str(folder))
    (folder / "song.mp3").write_bytes(b"ID3\x03\x00\x00\x00" + bytes(200))
    table.write_text("song.mp3\tla la la\n")
    with pytest.raises(ConfigError, match=r"^dataset.path: .*song.mp3 is MP3, not PCM WAV: convert it"):
        read_audio_folder(str(folder))
    (folder / "text.wav").write_text("not audio at all")
    table.write_text("text.wav\tnothing\n")
    with pytest.raises(ConfigError, match=r"^dataset.path: .*text.wav is not a PCM WAV file"):
        read_audio_folder(str(folder))
    table.unlink()
    (folder / "transcripts.jsonl").write_text('{"file": "a.wav"}\n')
    with pytest.raises(ConfigError, match=r"^dataset.transcripts: line 1 .* needs a file name"):
        read_audio_folder(str(folder))


def test_audio_folder_config(folder, tmp_path):
    (folder / "transcripts.tsv").write_text("a.wav\tgood morning\nb.wav\thello\n")
    cfg = AudioFolder(path=str(folder), max_examples=1)
    assert cfg.name == "audio_folder:clips"
    u = cfg.load_utterances()
    assert u.transcripts == ["good morning"] and len(u.audio[0]) == 8000
    assert len(cfg.load_utterances(sample_rate=8000).audio[0]) == 4000  # the model's rate wins
    with pytest.raises(ConfigError, match=r"^path: is required"):
        AudioFolder()
    with pytest.raises(ConfigError, match=r"^path: folder .* does not exist"):
        AudioFolder(path=str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match=r"^sample_rate: must be positive"):
        AudioFolder(path=str(folder), sample_rate=0)
    with pytest.raises(ConfigError, match=r"^max_examples: must be positive"):
        AudioFolder(path=str(folder), max_examples=0)
    with pytest.raises(ConfigError, match=r"^sample_rate: expected int"):
        AudioFolder(path=str(folder), sample_rate="fast")
    with pytest.raises(ConfigError, match=r"^transcripts: file .* does not exist"):
        AudioFolder(path=str(folder), transcripts=str(tmp_path / "missing.tsv"))


# --- perturbations ---------------------------------------------------------------------------------


@pytest.mark.parametrize("snr_db", [-5.0, 0.0, 10.0, 40.0])
def test_add_noise_at_snr_is_exact(snr_db):
    x = tone(1.0, 16000).astype(np.float32)
    y = add_noise_at_snr(x, snr_db, torch.Generator().manual_seed(0))
    assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == x.shape
    noise = y.astype(np.float64) - x.astype(np.float64)
    measured = 10 * math.log10(np.mean(x.astype(np.float64) ** 2) / np.mean(noise**2))
    assert measured == pytest.approx(snr_db, abs=1e-4)
    again = add_noise_at_snr(torch.from_numpy(x), snr_db, torch.Generator().manual_seed(0))
    assert isinstance(again, torch.Tensor) and again.dtype == torch.float32
    np.testing.assert_array_equal(again.numpy(), y)  # the same draw for numpy and torch input
    assert not np.array_equal(add_noise_at_snr(x, snr_db, np.random.default_rng(1)), y)
    silent = np.zeros(100, np.float32)
    np.testing.assert_array_equal(add_noise_at_snr(silent, snr_db, 0), silent)


def test_time_shift_moves_a_click():
    x = np.zeros(1000, np.float32)
    x[100] = 1.0
    right = time_shift(x, 0.01, 1000)
    assert right.shape == x.shape and right.dtype == np.float32 and int(np.argmax(right)) == 110
    left = time_shift(torch.from_numpy(x), -0.05, 1000)
    assert isinstance(left, torch.Tensor) and left.shape == (1000,) and int(left.argmax()) == 50
    assert not time_shift(x, -0.2, 1000).any() and not time_shift(x, 2.0, 1000).any()
    np.testing.assert_array_equal(time_shift(x, 0.0, 1000), x)


@pytest.mark.parametrize("n", [16000, 16001])
def test_change_speed_scales_length(n):
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32) * 0.1
    assert abs(len(change_speed(x, 2.0)) - n / 2) <= 1
    assert abs(len(change_speed(x, 0.5)) - 2 * n) <= 1
    faster = change_speed(torch.from_numpy(x), 1.1)
    assert isinstance(faster, torch.Tensor) and faster.dtype == torch.float32
    assert abs(len(faster) - n / 1.1) <= 1
    np.testing.assert_array_equal(change_speed(x, 1.0), x)
    with pytest.raises(ValueError):
        change_speed(x, 0.0)
