"""Greedy outputs of an encoder-decoder (T5, BART, Whisper) and transcripts of a CTC model, in batches.

Greedy decoding is written here rather than taken from ``model.generate``: generate's per-model
logic (Whisper's language detection, timestamp rules and forced tokens; generation configs that a
random-weight directory lacks) would make the same loop behave differently across kinds. This one
runs the encoder once, then the decoder one token at a time on its key/value cache, from the same
prompt the teacher-forced scores use, until every row has ended or ``max_new_tokens``."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from modelxray.core.progress import bar
from modelxray.measure.scoring import input_dtype, model_device


@torch.inference_mode()
def greedy_decode(
    model: nn.Module, encoder_inputs: dict[str, torch.Tensor], prompt: list[int], eos: int | None, max_new_tokens: int
) -> list[list[int]]:
    """The greedy continuation of ``prompt`` for each row of ``encoder_inputs`` (without the prompt,
    cut at the end token)."""
    device = model_device(model)
    encoder_inputs = {k: v.to(device) for k, v in encoder_inputs.items()}
    mask = encoder_inputs.get("attention_mask")
    encoder_args = dict(encoder_inputs)
    if "input_features" in encoder_args:
        encoder_args["input_features"] = encoder_args["input_features"].to(input_dtype(model))
    encoded = model.get_encoder()(**encoder_args)
    rows = next(iter(encoder_inputs.values())).shape[0]
    cur = torch.tensor([prompt] * rows, device=device)
    out = torch.zeros(rows, 0, dtype=torch.long, device=device)
    done = torch.zeros(rows, dtype=torch.bool, device=device)
    past = None
    cache_arg = _cache_argument(model)
    for _ in range(max_new_tokens):
        step = model(
            encoder_outputs=encoded,
            attention_mask=mask,
            decoder_input_ids=cur if past is None else cur[:, -1:],
            use_cache=True,
            **{cache_arg: past},
        )
        past = step[cache_arg] if cache_arg in step else step.get("past_key_values")
        nxt = step.logits[:, -1].argmax(-1)
        if eos is not None:
            nxt = torch.where(done, torch.full_like(nxt, eos), nxt)
            done |= nxt == eos
        out = torch.cat([out, nxt[:, None]], dim=1)
        cur = torch.cat([cur, nxt[:, None]], dim=1)
        if bool(done.all()):
            break
    result = []
    for row in out.tolist():
        result.append(row[: row.index(eos)] if eos is not None and eos in row else row)
    return result


def _cache_argument(model: nn.Module) -> str:
    """The name the model's forward takes its key/value cache by (``cache`` in newer transformers,
    ``past_key_values`` before)."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def generate_texts(
    model: nn.Module,
    tokenizer: Any,
    encoder_batches: list[dict[str, torch.Tensor]],
    prompt: list[int],
    max_new_tokens: int,
    progress: bool = False,
    desc: str = "generating",
) -> list[str]:
    """Greedy outputs of every batch of encoder inputs, decoded without special tokens."""
    eos = getattr(tokenizer, "eos_token_id", None)
    texts = []
    for batch in bar(encoder_batches, desc=desc, enabled=progress):
        for ids in greedy_decode(model, batch, prompt, eos, max_new_tokens):
            texts.append(tokenizer.decode(ids, skip_special_tokens=True).strip())
    return texts


def prompt_inputs(processor: Any, prompt: str, image: Any) -> dict[str, torch.Tensor]:
    """The processor's inputs for ``prompt`` and ``image``, ready for the answer to follow: an end
    token the tokenizer appends to every text (BART-style post-processing) is cut off."""
    out = dict(processor(text=prompt, images=image, return_tensors="pt"))
    eos = getattr(getattr(processor, "tokenizer", processor), "eos_token_id", None)
    ids = out["input_ids"]
    if eos is not None and int(ids[0, -1]) == eos:  # cut from every per-token tensor (Qwen2-VL's token types too)
        out = {k: v[:, :-1] if torch.is_tensor(v) and v.shape == ids.shape else v for k, v in out.items()}
    return out


@torch.inference_mode()
def generate_answers(
    model: nn.Module, processor: Any, images: list, prompts: list[str], max_new_tokens: int, progress: bool = False
) -> list[str]:
    """A generative vision-language model's greedy answers (transformers' ``generate``, no sampling)
    to each prompt about its image, decoded without special tokens."""

    device = next(model.parameters()).device
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    texts = []
    for image, prompt in bar(list(zip(images, prompts)), desc="answers", enabled=progress):
        inputs = prompt_inputs(processor, prompt, image)
        inputs = {k: v.to(device=device, dtype=dtype if v.is_floating_point() else v.dtype) for k, v in inputs.items()}
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        tok = getattr(processor, "tokenizer", processor)
        texts.append(tok.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True).strip())
    return texts


@torch.inference_mode()
def ctc_logits(model: nn.Module, batches: list[dict[str, torch.Tensor]]) -> list[torch.Tensor]:
    """A CTC model's frame logits (float32, CPU) for every batch of ``input_values``."""
    device, dtype = model_device(model), input_dtype(model)
    out = []
    for batch in batches:
        values = batch["input_values"].to(device=device, dtype=dtype)
        out.append(model(input_values=values).logits.float().cpu())
    return out


def ctc_transcripts(tokenizer: Any, logits: list[torch.Tensor]) -> list[str]:
    """Greedy CTC transcripts: the best token per frame, repeats merged and blanks dropped (the
    tokenizer's ``decode`` of a CTC tokenizer does both)."""
    texts = []
    for batch in logits:
        for ids in batch.argmax(-1).tolist():
            texts.append(tokenizer.decode(ids, skip_special_tokens=True).strip())
    return texts
