"""Questions about images for generative vision-language models (LLaVA-style: an image and a prompt
in, text out), offline: scikit-learn's handwritten digits, each asked "What digit is this?" and
answered with its label.

Each example is one window: the model's processor places the image among the prompt's tokens (it
expands the image token into the model's image positions), the answer follows, and only the answer's
tokens (and the end token) are scored, each from the position before it, as a causal LM is scored.
So the answer's loss, perplexity and accuracy, and the KL and top-1 agreement of a quantized model
with the unquantized one, come from the same scoring loop as every other text kind.

The prompt is the model's chat template where its tokenizer has one (real models), else
``USER: <image>\\n{question} ASSISTANT:``."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch

from modelxray.core.errors import ConfigError
from modelxray.data.image_files import read_image
from modelxray.data.text_tasks import TaskData, _named
from modelxray.measure.generation import prompt_inputs
from modelxray.metrics.windows import IGNORE, Window

QUESTION = "What digit is this?"


def prompt_for(processor: Any, question: str) -> str:
    """The text before the answer: the chat template's user turn with an image, or a plain one."""
    tok = getattr(processor, "tokenizer", processor)
    if getattr(tok, "chat_template", None) or getattr(processor, "chat_template", None):
        turn = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
        return processor.apply_chat_template(turn, add_generation_prompt=True)
    if getattr(processor, "num_query_tokens", None) is not None:  # BLIP-2: its processor adds the image's tokens
        return f"Question: {question} Answer:"
    image = getattr(processor, "image_token", None) or "<image>"
    if _takes_suffix(processor):  # PaliGemma: the image, then the question (its processor adds "\n")
        return f"{image}{question}"
    return f"USER: {image}\n{question} ASSISTANT:"


def _takes_suffix(processor: Any) -> bool:
    """A processor that takes the answer apart (``suffix``) and marks it in ``token_type_ids``, as
    PaliGemma's does: its prompt attends both ways, the answer causally."""
    import inspect

    try:
        return "suffix" in inspect.signature(processor.__call__).parameters
    except (TypeError, ValueError):
        return False


def to_rgb(digit: torch.Tensor, side: int = 32):
    """An (8, 8) digit in [0, 1] as an RGB uint8 image of ``side`` pixels (each pixel a square)."""
    import numpy as np

    scale = max(1, side // 8)
    grey = (digit.numpy() * 255).astype(np.uint8).repeat(scale, 0).repeat(scale, 1)
    return np.stack([grey] * 3, axis=-1)


def digit_images(
    n: int, seed: int, side: int = 32, test_fraction: float = 0.25, split_seed: int = 0, part: str = "test"
) -> tuple[list, list[int]]:
    """``n`` digits of the ``test`` (or ``train``) part of the split (seeded), as RGB uint8 images of
    ``side`` pixels."""
    from modelxray.data.digits import load_digits_split

    split = load_digits_split(test_fraction, split_seed)
    x, y = (split.x_train, split.y_train) if part == "train" else (split.x_test, split.y_test)
    if n > x.shape[0]:
        raise ConfigError("dataset.examples", f"the digits {part} split holds {x.shape[0]} images, not {n}")
    chosen = sorted(random.Random(seed).sample(range(x.shape[0]), n))
    return [to_rgb(x[i].view(8, 8), side) for i in chosen], [int(y[i]) for i in chosen]


def answer_windows(
    processor: Any, images: list, prompts: list[str], answers: list[str], name: str, description: str
) -> TaskData:
    """One window per (image, prompt, answer): the processor's inputs for prompt + answer, scored on
    the tokens after the prompt (the answer's, and the end token where the tokenizer adds one). A
    processor that takes the answer as ``suffix`` (PaliGemma) gets it so: the answer is then marked
    in ``token_type_ids`` and read causally, never seen ahead of the position that predicts it."""
    windows = []
    suffix = _takes_suffix(processor)
    for image, prompt, answer in zip(images, prompts, answers):
        if suffix:
            full = processor(text=prompt, images=image, suffix=answer.lstrip(), return_tensors="pt")
            ids = full["input_ids"][0]
            scored = (full["token_type_ids"][0] == 1).nonzero().flatten()
            targets = torch.full_like(ids, IGNORE)
            targets[scored - 1] = ids[scored]  # the logits at t predict token t + 1
        else:
            full = processor(text=prompt + answer, images=image, return_tensors="pt")
            ids = full["input_ids"][0]
            head = prompt_inputs(processor, prompt, image)["input_ids"][0]
            same = int((ids[: head.numel()] == head).long().cumprod(0).sum())  # the prompt's tokens in the whole
            targets = torch.full_like(ids, IGNORE)
            targets[same - 1 : -1] = ids[same:]
        inputs = {"input_ids": ids, "attention_mask": full["attention_mask"][0]}
        inputs.update({k: v[0] for k, v in full.items() if k not in inputs and k != "labels" and torch.is_tensor(v)})
        windows.append(Window(_named("input_ids", **inputs), targets))
    meta = {"prompts": prompts, "references": answers, "images": images}
    return TaskData(name, "image_text_to_text", windows, description, len(windows), meta)


def user_questions(processor: Any, rows: list, name: str, path: str) -> TaskData:
    """A user's (image file, question, answer) rows: each question in the model's prompt format, the
    answer scored after it (with a leading space, as an answer follows the prompt)."""
    images = [read_image(Path(where), "dataset.path", "RGB") for where, _, _ in rows]
    prompts = [prompt_for(processor, q) for _, q, _ in rows]
    answers = [a if a[:1].isspace() else f" {a}" for _, _, a in rows]
    desc = f"{len(rows)} questions about images from {path}, scored on the answer tokens"
    return answer_windows(processor, images, prompts, answers, name, desc)


def digit_questions(
    processor: Any,
    n: int | None,
    seed: int,
    name: str = "digits",
    test_fraction: float = 0.25,
    split_seed: int = 0,
    part: str = "test",
) -> TaskData:
    """``n`` digits of the ``test`` split (None: all; ``train``: calibration questions, never
    evaluated) asked "What digit is this?", answered with their label."""
    if n is None:
        from modelxray.data.digits import load_digits_split

        n = int(load_digits_split(test_fraction, split_seed).x_test.shape[0])
    images, labels = digit_images(n, seed, 32, test_fraction, split_seed, part)
    prompt = prompt_for(processor, QUESTION)
    desc = f'{n} handwritten digits ({part} split, seed {seed}) asked "{QUESTION}", scored on the answer tokens'
    return answer_windows(processor, images, [prompt] * n, [f" {y}" for y in labels], name, desc)
