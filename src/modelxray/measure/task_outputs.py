"""What a text or speech model produces beyond its scored logits: a seq2seq model's or Whisper's
greedy outputs, a CTC model's frame distributions and transcripts. Computed on the unquantized model
(kept as ``TaskReference`` before a run quantizes it) and on the model under analysis, so the
analyzers can say how far quantization moved what the user actually reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from modelxray.measure.generation import ctc_logits, ctc_transcripts, generate_answers, generate_texts
from modelxray.metrics.windows import NamedTensors

ENCODER_KEYS = ("input_ids", "attention_mask", "input_features")


def encoder_batches(data: Any, n: int, batch_size: int) -> list[dict[str, torch.Tensor]]:
    """The first ``n`` examples' encoder inputs (source tokens, or audio features), in batches."""
    windows = data.windows[:n]
    out = []
    for i in range(0, len(windows), batch_size):
        batch = NamedTensors.stack([w.inputs for w in windows[i : i + batch_size]])
        out.append({k: v for k, v in batch.items() if k in ENCODER_KEYS})
    return out


def audio_inputs(processor: Any, audio: list, sample_rate: int) -> dict[str, torch.Tensor]:
    """The feature extractor's model inputs for a batch of waveforms: Whisper's log-mel
    ``input_features`` (fixed length), or a CTC model's ``input_values`` padded to the longest."""
    names = getattr(processor, "model_input_names", None) or []
    if "input_features" in names:  # Whisper: its own fixed window (padding="max_length" by default)
        out = processor(audio, sampling_rate=sample_rate, return_tensors="pt")
    else:
        out = processor(audio, sampling_rate=sample_rate, return_tensors="pt", padding=True)
    return {k: v for k, v in out.items() if k in ("input_features", "input_values")}


def audio_batches(data: Any, processor: Any, n: int, batch_size: int) -> list[dict[str, torch.Tensor]]:
    """The first ``n`` utterances as a CTC model's ``input_values``, each batch padded to its longest."""
    audio, rate = data.meta["audio"][:n], data.meta["sample_rate"]
    return [audio_inputs(processor, audio[i : i + batch_size], rate) for i in range(0, len(audio), batch_size)]


def generations(model: nn.Module, subject: Any, n: int, batch_size: int, max_new_tokens: int, progress: bool):
    """Greedy outputs of the first ``n`` examples of an encoder-decoder (seq2seq, Whisper)."""
    batches = encoder_batches(subject.data, n, batch_size)
    prompt = subject.data.meta["prompt"]
    return generate_texts(model, subject.tokenizer, batches, prompt, max_new_tokens, progress, "greedy outputs")


def answers(model: nn.Module, subject: Any, n: int, max_new_tokens: int, progress: bool) -> list[str]:
    """A generative vision-language model's greedy answers to the first ``n`` questions."""
    meta = subject.data.meta
    return generate_answers(model, subject.processor, meta["images"][:n], meta["prompts"][:n], max_new_tokens, progress)


def ctc_outputs(model: nn.Module, subject: Any, n: int, batch_size: int) -> tuple[list[torch.Tensor], list[str]]:
    """A CTC model's frame logits and greedy transcripts on the first ``n`` utterances."""
    logits = ctc_logits(model, audio_batches(subject.data, subject.processor, n, batch_size))
    return logits, ctc_transcripts(subject.tokenizer, logits)


def example_batch(subject: Any, batch_size: int) -> NamedTensors:
    """``batch_size`` real examples of the subject's task as the model's named inputs (cycling
    through them when there are fewer): a scored window's inputs, or a CTC model's audio."""
    from modelxray.metrics.windows import stack_inputs

    data = subject.data
    if data.windows:
        return stack_inputs(data.windows, batch_size)
    values = audio_batches(data, subject.processor, batch_size, batch_size)[0]["input_values"]
    named = NamedTensors(input_values=values[torch.arange(batch_size) % values.shape[0]])
    named.primary = "input_values"
    return named


@dataclass
class TaskReference:
    """The unquantized model's outputs on a text or speech task: its ``Reference`` over the scored
    windows (argmax and log-probabilities at the scored positions), its greedy outputs, and a CTC
    model's frame log-probabilities and transcripts."""

    windows: Any = None  # measure.reference.Reference
    texts: list[str] | None = None
    frame_logprobs: list[torch.Tensor] | None = None


def answer_outputs(subject: Any, cfg: Any, n: int, progress: bool = False) -> dict[str, Any]:
    """A generative vision-language model's greedy answers to the first ``n`` questions."""
    return {"texts": answers(subject.model, subject, n, cfg.max_new_tokens, progress)} if n > 0 else {}


def transcript_outputs(subject: Any, cfg: Any, n: int, progress: bool = False) -> dict[str, Any]:
    """A CTC model's greedy transcripts of the first ``n`` utterances and its frames' log-probabilities."""
    logits, texts = ctc_outputs(subject.model, subject, n, cfg.batch_size)
    return {"texts": texts, "frame_logprobs": [torch.log_softmax(x, -1) for x in logits]}


def generated_outputs(subject: Any, cfg: Any, n: int, progress: bool = False) -> dict[str, Any]:
    """An encoder-decoder's (seq2seq, Whisper) greedy outputs of the first ``n`` examples, where its
    data has a decoder prompt to generate from; none for the others (masked LMs, text classifiers)."""
    if n > 0 and subject.data.meta.get("prompt"):
        return {"texts": generations(subject.model, subject, n, cfg.batch_size, cfg.max_new_tokens, progress)}
    return {}


def capture_task(subject: Any, cfg: Any, outputs: Any, progress: bool = False) -> TaskReference:
    """``TaskReference`` of the subject's model, with the performance analyzer's settings ``cfg``:
    its ``Reference`` over the scored windows, and ``outputs`` (``answer_outputs``,
    ``transcript_outputs`` or ``generated_outputs``, chosen by the caller through the model's kind)
    on the first ``generate_examples``."""
    from modelxray.measure.reference import Reference

    data, ref = subject.data, TaskReference()
    if data.windows:
        ref.windows = Reference(subject.model, data.windows, cfg.batch_size, cfg.kl_examples, progress, "reference")
    n = min(cfg.generate_examples, data.n_examples)
    for key, value in outputs(subject, cfg, n, progress).items():
        setattr(ref, key, value)
    return ref
