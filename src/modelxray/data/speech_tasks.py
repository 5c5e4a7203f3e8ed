"""Evaluation examples for speech recognisers, built from utterances (audio and transcripts):
an encoder-decoder (Whisper) gets one window per utterance, its audio features and the transcript's
tokens behind the decoder prompt, scored teacher-forced like a seq2seq model; a CTC model (Wav2Vec2,
HuBERT) gets the raw audio, padded to one length, and is scored by its transcripts alone (CTC has
no per-position target). Both keep the audio and transcripts for word error rates."""

from __future__ import annotations

from typing import Any

import torch

from modelxray.core.errors import ConfigError
from modelxray.data.text_tasks import TaskData, _named, _special_id, target_ids
from modelxray.measure.task_outputs import audio_inputs
from modelxray.metrics.windows import IGNORE, Window


def whisper_windows(
    utterances: Any, processor: Any, tokenizer: Any, prompt: list[int], max_target: int, name: str
) -> TaskData:
    """One window per utterance: its features, the decoder's input (the transcript behind the prompt)
    and targets (the transcript's tokens and the end token; the prompt is given, not scored)."""
    eos = _special_id(tokenizer, "eos")
    features = audio_inputs(processor, utterances.audio, utterances.sample_rate)["input_features"]
    seqs = [target_ids(tokenizer, t, prompt, eos, max_target) for t in utterances.transcripts]
    pad = _special_id(tokenizer, "pad")
    pad = eos if pad is None else pad
    length = max(map(len, seqs)) - 1
    windows = []
    for feats, seq in zip(features, seqs):
        dec = torch.full((length,), pad if pad is not None else 0, dtype=torch.long)
        dec[: len(seq) - 1] = torch.tensor(seq[:-1])
        labels = torch.full((length,), IGNORE, dtype=torch.long)
        labels[: len(seq) - 1] = torch.tensor(seq[1:])
        labels[: len(prompt) - 1] = IGNORE
        windows.append(Window(_named("decoder_input_ids", input_features=feats, decoder_input_ids=dec), labels))
    return _speech_data(utterances, name, windows, prompt)


def ctc_examples(utterances: Any, name: str) -> TaskData:
    """A CTC model's examples: no windows (its transcripts score it), the audio kept in ``meta``."""
    return _speech_data(utterances, name, None, [])


def _speech_data(utterances: Any, name: str, windows, prompt: list[int]) -> TaskData:
    if not utterances.transcripts:
        raise ConfigError("dataset", f"{name}: no utterances to transcribe")
    seconds = sum(len(a) for a in utterances.audio) / utterances.sample_rate
    desc = f"{len(utterances.transcripts)} utterances ({seconds:.0f} s of audio) from {utterances.source}"
    meta = {
        "audio": utterances.audio,
        "sample_rate": utterances.sample_rate,
        "references": list(utterances.transcripts),
        "prompt": prompt,
    }
    return TaskData(name, "speech_recognition", windows, desc, len(utterances.transcripts), meta)


def labelled_clips(
    utterances: Any, labels: list[int], processor: Any, names: list[str], name: str, task: str
) -> TaskData:
    """One window per clip: its features (padded to the longest clip) scored on its label."""
    if not utterances.audio:
        raise ConfigError("dataset", f"{name}: no clips to classify")
    inputs = audio_inputs(processor, utterances.audio, utterances.sample_rate)
    primary = "input_features" if "input_features" in inputs else "input_values"
    windows = [
        Window(_named(primary, **{primary: inputs[primary][i]}), torch.tensor([label]))
        for i, label in enumerate(labels)
    ]
    seconds = sum(len(a) for a in utterances.audio) / utterances.sample_rate
    desc = f"{len(windows)} clips ({seconds:.0f} s of audio) from {utterances.source}"
    meta = {
        "audio": utterances.audio,
        "sample_rate": utterances.sample_rate,
        "label_names": names,
        "labels": list(labels),
        "references": list(utterances.transcripts),
    }
    return TaskData(name, task, windows, desc, len(windows), meta)
