"""Evaluation examples for models that are not causal LMs, built from text: masked windows for an
encoder, (source, target) pairs for a seq2seq model, labelled paragraphs and tagged words for text
classifiers. Every example is one ``Window`` of named inputs and aligned targets, so the scoring
loops of the causal LMs (loss, accuracy, KL and top-1 agreement, all with standard errors) serve
every kind; a ``TaskData`` holds them with what a report says about them.

Everything is seeded by the dataset (``dataset.task_seed``), never by the run: the masked positions,
dropped words and sampled paragraphs are the same in every run, so runs compare example by example.
Datasets take the tokenizer as an argument and import no model code.
"""

from __future__ import annotations

import keyword
import random
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from modelxray.core.errors import ConfigError
from modelxray.metrics.windows import IGNORE, NamedTensors, Window


@dataclass
class TaskData:
    """A task's evaluation examples as windows (``None`` for a CTC speech model, scored by its
    transcripts alone) with what the report says about them. ``meta`` holds what generation and
    transcription need: source and reference texts, audio, label names."""

    name: str
    task: str
    windows: list[Window] | None
    description: str  # one line: what each example is and how it was made
    n_examples: int
    meta: dict[str, Any] = field(default_factory=dict)
    # inputs that GPTQ and AWQ calibrate on: examples of the same task that are never evaluated,
    # built when first asked for (``calibration_examples``) by ``make_calibration``
    make_calibration: Any = field(default=None, repr=False)  # () -> (windows, origin) or None
    _calibration: tuple[list[Window], str] | None = field(default=None, repr=False)

    def calibration_examples(self) -> tuple[list[Window], str] | None:
        """The calibration windows and where they come from, or None when the data gives none."""
        if self._calibration is None and self.make_calibration is not None:
            self._calibration = self.make_calibration()
            self.make_calibration = None
        return self._calibration

    @property
    def n_scored(self) -> int:
        """Scored positions over every window (masked tokens, target tokens, labels)."""
        return sum(int((w.targets != IGNORE).sum()) for w in self.windows or [])


def _named(primary: str, **tensors: torch.Tensor) -> NamedTensors:
    out = NamedTensors(tensors)
    out.primary = primary
    return out


def _token_ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _special_id(tokenizer: Any, *names: str) -> int | None:
    for name in names:
        value = getattr(tokenizer, f"{name}_token_id", None)
        if value is not None:
            return int(value)
    return None


# -- masked language models -----------------------------------------------------------------------
def masked_windows(
    ids: torch.Tensor, tokenizer: Any, seq_len: int, max_examples: int, mask_rate: float, seed: int, name: str
) -> TaskData:
    """Consecutive windows of the token stream ``ids`` between the tokenizer's start and end tokens,
    with a seeded ``mask_rate`` of each window's tokens replaced by the mask token (at least one per
    window). Each masked position is scored on the token it hid, as BERT was trained; the replacement
    is always the mask token (no random or kept tokens), so the score is the model's guess from
    context alone."""
    mask = _special_id(tokenizer, "mask")
    if mask is None:
        raise ConfigError(
            "model.tokenizer", f"{name}: the tokenizer has no mask token, which a masked LM is scored with"
        )
    start, end = _special_id(tokenizer, "cls", "bos"), _special_id(tokenizer, "sep", "eos")
    body = masked_body(tokenizer, seq_len)
    if body < 2:
        raise ConfigError("dataset.seq_len", f"must leave at least 2 text tokens per window, got {seq_len}")
    gen = torch.Generator().manual_seed(seed)
    windows = []
    for begin in range(0, ids.numel() - body + 1, body):
        if len(windows) == max_examples:
            break
        chunk = ids[begin : begin + body]
        chosen = torch.rand(body, generator=gen) < mask_rate
        if not chosen.any():
            chosen[int(torch.randint(0, body, (1,), generator=gen))] = True
        inputs = torch.where(chosen, torch.full_like(chunk, mask), chunk)
        targets = torch.where(chosen, chunk, torch.full_like(chunk, IGNORE))
        inputs = _wrap(inputs, start, end)
        targets = _wrap(targets, None if start is None else IGNORE, None if end is None else IGNORE)
        windows.append(Window(_named("input_ids", input_ids=inputs, attention_mask=torch.ones_like(inputs)), targets))
    if not windows:
        raise ConfigError("dataset", f"{name} is shorter than one window of {seq_len} tokens; give more text")
    desc = (
        f"{len(windows)} windows of {seq_len} tokens with a seeded {mask_rate:.0%} of tokens masked "
        "(scored on the hidden tokens)"
    )
    return TaskData(name, "masked_lm", windows, desc, len(windows), {"mask_rate": mask_rate})


def masked_body(tokenizer: Any, seq_len: int) -> int:
    """Text tokens per masked window: ``seq_len`` less the start and end tokens the tokenizer has."""
    start, end = _special_id(tokenizer, "cls", "bos"), _special_id(tokenizer, "sep", "eos")
    return seq_len - (start is not None) - (end is not None)


def _wrap(t: torch.Tensor, start: int | None, end: int | None) -> torch.Tensor:
    parts = ([torch.tensor([start])] if start is not None else []) + [t]
    parts += [torch.tensor([end])] if end is not None else []
    return torch.cat(parts)


# -- sequence-to-sequence -------------------------------------------------------------------------
def passages(text: str, min_words: int, max_words: int) -> list[str]:
    """Runs of ``min_words`` to ``max_words`` words of prose (no code lines), paragraph by paragraph."""
    out = []
    for para in re.split(r"\n\s*\n", text):
        lines = [ln.strip() for ln in para.splitlines() if ln.strip() and not ln.startswith(("  ", ">>>", "..."))]
        words = " ".join(lines).split()
        if len(words) < min_words or any(ch in para for ch in "{}=<>"):
            continue
        for i in range(0, len(words) - min_words + 1, max_words):
            out.append(" ".join(words[i : i + max_words]))
    return out


def denoising_pairs(
    text: str, n: int, drop_rate: float, seed: int, words: int = 24, exclude: frozenset[str] = frozenset()
) -> list[tuple[str, str]]:
    """(source, target) pairs for a seq2seq model: a passage of prose with a seeded ``drop_rate`` of
    its words deleted, and the whole passage (none of the passages in ``exclude``). Reconstruction is what BART was trained on and what a
    small seq2seq model learns in minutes, so the target's loss and a greedy output's chrF mean
    something for any model; a user's own pairs come from ``dataset=text_pairs``."""
    rng = random.Random(seed)
    found = [p for p in passages(text, words // 2, words) if len(p.split()) >= words // 2 and p not in exclude]
    if len(found) < n:
        raise ConfigError("dataset.examples", f"the text holds {len(found)} passages of prose, fewer than {n}")
    chosen = sorted(rng.sample(range(len(found)), n))
    pairs = []
    for i in chosen:
        target = found[i]
        kept = [w for w in target.split() if rng.random() >= drop_rate]
        pairs.append((" ".join(kept or target.split()[:1]), target))
    return pairs


def decoder_prompt(config: Any, generation_config: Any = None) -> list[int]:
    """The tokens a decoder starts from: ``decoder_start_token_id`` (and BART's forced first token)."""
    start = getattr(config, "decoder_start_token_id", None)
    if start is None and generation_config is not None:
        start = getattr(generation_config, "decoder_start_token_id", None)
    if start is None:
        raise ConfigError("model", "the model's config names no decoder_start_token_id: a decoder cannot start")
    prompt = [int(start)]
    forced = getattr(generation_config, "forced_bos_token_id", None)
    if forced is None:
        forced = getattr(config, "forced_bos_token_id", None)
    if forced is not None:
        prompt.append(int(forced))
    return prompt


def target_ids(tokenizer: Any, text: str, prompt: list[int], eos: int | None, max_len: int) -> list[int]:
    """The decoder's token sequence for ``text``: the prompt, the text's tokens, the end token."""
    body = _token_ids(tokenizer, text)[: max_len - len(prompt) - 1]
    return prompt + body + ([eos] if eos is not None else [])


def seq2seq_windows(
    pairs: list[tuple[str, str]],
    tokenizer: Any,
    prompt: list[int],
    max_source: int,
    max_target: int,
    name: str,
    description: str,
) -> TaskData:
    """One window per pair: the source (with the tokenizer's special tokens, padded to the longest
    source) and the decoder's input, the target shifted right behind the prompt, scored on every
    target token and the end token (padded with ``IGNORE``)."""
    pad = _special_id(tokenizer, "pad")
    pad = 0 if pad is None else pad
    eos = _special_id(tokenizer, "eos", "sep")
    sources = [list(tokenizer(s, truncation=True, max_length=max_source)["input_ids"]) for s, _ in pairs]
    targets = [target_ids(tokenizer, t, prompt, eos, max_target) for _, t in pairs]
    src_len, tgt_len = max(map(len, sources)), max(map(len, targets)) - 1
    windows = []
    for src, tgt in zip(sources, targets):
        ids = torch.full((src_len,), pad, dtype=torch.long)
        ids[: len(src)] = torch.tensor(src)
        mask = torch.zeros(src_len, dtype=torch.long)
        mask[: len(src)] = 1
        dec = torch.full((tgt_len,), pad, dtype=torch.long)
        dec[: len(tgt) - 1] = torch.tensor(tgt[:-1])
        labels = torch.full((tgt_len,), IGNORE, dtype=torch.long)
        labels[: len(tgt) - 1] = torch.tensor(tgt[1:])
        labels[: len(prompt) - 1] = IGNORE  # a forced prompt token is given, not predicted
        inputs = _named("decoder_input_ids", input_ids=ids, attention_mask=mask, decoder_input_ids=dec)
        windows.append(Window(inputs, labels))
    meta = {"sources": [s for s, _ in pairs], "references": [t for _, t in pairs], "prompt": prompt}
    return TaskData(name, "seq2seq_lm", windows, description, len(windows), meta)


# -- text classification ---------------------------------------------------------------------------
def topic_paragraphs(topics: dict[str, str], n_classes: int, n: int, seed: int) -> tuple[list[str], list[int], list]:
    """Paragraphs labelled by the documentation topic they come from: the ``n_classes`` topics with
    the most paragraphs of prose (ties by name), up to ``n`` paragraphs in all, balanced, seeded."""
    rng = random.Random(seed)
    by_topic = {k: passages(v, 8, 48) for k, v in topics.items()}
    ranked = sorted(by_topic, key=lambda k: (-len(by_topic[k]), k))[:n_classes]
    if len(ranked) < n_classes or not all(by_topic[k] for k in ranked):
        raise ConfigError("dataset", f"the text has fewer than {n_classes} topics with paragraphs of prose")
    names = sorted(ranked)
    per = max(1, n // n_classes)
    texts, labels = [], []
    for label, topic in enumerate(names):
        paras = by_topic[topic]
        for i in sorted(rng.sample(range(len(paras)), min(per, len(paras)))):
            texts.append(paras[i])
            labels.append(label)
    return texts, labels, names


def classification_windows(
    texts: list[str], labels: list[int], tokenizer: Any, seq_len: int, name: str, description: str, names: list
) -> TaskData:
    """One window per text (padded to the longest, with its attention mask), scored on its label."""
    pad = _special_id(tokenizer, "pad")
    pad = 0 if pad is None else pad
    encoded = [list(tokenizer(t, truncation=True, max_length=seq_len)["input_ids"]) for t in texts]
    length = max(map(len, encoded))
    windows = []
    for ids, label in zip(encoded, labels):
        row = torch.full((length,), pad, dtype=torch.long)
        row[: len(ids)] = torch.tensor(ids)
        mask = (torch.arange(length) < len(ids)).long()
        windows.append(Window(_named("input_ids", input_ids=row, attention_mask=mask), torch.tensor([label])))
    meta = {"label_names": names, "labels": labels, "texts": list(texts)}
    return TaskData(name, "sequence_classification", windows, description, len(windows), meta)


WORD_TAGS = ("word", "Capitalized", "number", "punctuation", "keyword")  # word shapes, the offline token labels


def word_tag(word: str, n_classes: int) -> int:
    """The shape of a word: 0 lowercase word, 1 capitalized, 2 number, 3 punctuation or symbol,
    4 a Python keyword; classes beyond ``n_classes`` fold into the last."""
    if keyword.iskeyword(word):
        tag = 4
    elif word.isdigit():
        tag = 2
    elif not any(ch.isalnum() for ch in word):
        tag = 3
    elif word[:1].isupper():
        tag = 1
    else:
        tag = 0
    return min(tag, n_classes - 1)


def tagged_windows(
    texts: list[str], tokenizer: Any, seq_len: int, n_classes: int, name: str, words_of=None
) -> TaskData:
    """One window per text, each word labelled by ``word_tag`` (or ``words_of(text)``: (word, label)
    pairs) on its first sub-token, the rest ``IGNORE``, as token classifiers are trained and scored."""
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError("model.tokenizer", "token classification needs a fast tokenizer (it maps tokens to words)")
    pad = _special_id(tokenizer, "pad")
    pad = 0 if pad is None else pad
    rows = []
    for text in texts:
        pairs = words_of(text) if words_of else [(w, word_tag(w, n_classes)) for w in re.findall(r"\w+|[^\w\s]", text)]
        enc = tokenizer([w for w, _ in pairs], is_split_into_words=True, truncation=True, max_length=seq_len)
        labels, seen = [], set()
        for wid in enc.word_ids():
            labels.append(IGNORE if wid is None or wid in seen else pairs[wid][1])
            seen.add(wid)
        rows.append((list(enc["input_ids"]), labels))
    length = max(len(ids) for ids, _ in rows)
    windows = []
    for ids, labels in rows:
        row = torch.full((length,), pad, dtype=torch.long)
        row[: len(ids)] = torch.tensor(ids)
        tgt = torch.full((length,), IGNORE, dtype=torch.long)
        tgt[: len(labels)] = torch.tensor(labels)
        mask = (torch.arange(length) < len(ids)).long()
        windows.append(Window(_named("input_ids", input_ids=row, attention_mask=mask), tgt))
    desc = f"{len(windows)} paragraphs, each word tagged by its shape ({', '.join(WORD_TAGS[:n_classes])})"
    meta = {"label_names": WORD_TAGS[:n_classes], "texts": list(texts)}
    return TaskData(name, "token_classification", windows, desc, len(windows), meta)
