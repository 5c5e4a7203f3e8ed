"""The evaluation examples of a model that is not a causal LM, from the configured dataset: a text
dataset (``pydoc_topics`` by default, ``text_files``...) becomes masked windows, denoising pairs,
topic-labelled paragraphs, tagged words or spoken sentences, by the model's kind; a user's
``labelled_text``, ``text_pairs`` or ``audio_folder`` gives its examples directly. So
``model=hf model.name_or_path=DIR`` with no ``dataset=`` runs on every kind, offline."""

from __future__ import annotations

import random
from typing import Any

from modelxray.core.errors import ConfigError
from modelxray.data.base import TextDataset, tokenize_cached
from modelxray.data.text_tasks import (
    TaskData,
    classification_windows,
    decoder_prompt,
    denoising_pairs,
    masked_windows,
    seq2seq_windows,
    tagged_windows,
    topic_paragraphs,
)

# the datasets that fit each kind, for the one-line error that names them
FITTING = {
    "masked_lm": "a text dataset (pydoc_topics, text_files, hf, wikitext2)",
    "seq2seq_lm": "a text dataset (pydoc_topics: denoising pairs) or dataset=text_pairs",
    "sequence_classification": "dataset=pydoc_topics (paragraphs labelled by topic) or dataset=labelled_text",
    "token_classification": "a text dataset (words tagged by shape) or dataset=labelled_text is not per-token",
    "speech_seq2seq": "a text dataset (sentences spoken by espeak-ng) or dataset=audio_folder",
    "speech_ctc": "a text dataset (sentences spoken by espeak-ng) or dataset=audio_folder",
    "image_text_to_text": "dataset=digits (each digit asked what it is), dataset=image_questions, or the default",
}


def _cache(dataset: Any) -> str:
    import os
    from pathlib import Path

    return str(Path(os.path.expanduser(getattr(dataset, "cache_dir", "~/.cache/modelxray"))))


def _num_labels(model: Any) -> int:
    return int(getattr(getattr(model, "config", None), "num_labels", 2) or 2)


def task_data(kind: str, dataset: Any, loaded: Any, progress: bool = False) -> TaskData:
    """``dataset`` as the examples a ``kind`` model is scored on (``loaded``: its model, tokenizer and
    feature extractor), or a one-line ConfigError naming the datasets that fit."""
    from modelxray.data.digits import Digits
    from modelxray.data.speech import AudioFolder
    from modelxray.data.user_text import ImageQuestions, LabelledText, TextPairs

    tok, model = loaded.tokenizer, loaded.model
    if isinstance(dataset, TextDataset):
        return _from_text(kind, dataset, loaded, progress)
    if isinstance(dataset, TextPairs) and kind == "seq2seq_lm":
        pairs = dataset.read()
        prompt = decoder_prompt(model.config, getattr(model, "generation_config", None))
        desc = f"{len(pairs)} source/target pairs from {dataset.path}"
        return seq2seq_windows(pairs, tok, prompt, dataset.seq_len, dataset.seq_len, dataset.name, desc)
    if isinstance(dataset, LabelledText) and kind == "sequence_classification":
        texts, labels = dataset.read()
        ids, names = _label_ids(labels, model, dataset.path)
        desc = f"{len(texts)} labelled texts from {dataset.path}"
        return classification_windows(texts, ids, tok, dataset.seq_len, dataset.name, desc, names)
    if kind == "image_text_to_text" and isinstance(dataset, ImageQuestions):
        from modelxray.data.image_questions import user_questions

        return user_questions(loaded.processor, dataset.read(), dataset.name, dataset.path)
    if kind == "image_text_to_text" and isinstance(dataset, Digits):
        from modelxray.data.image_questions import digit_questions

        split = (dataset.test_fraction, dataset.split_seed)
        data = digit_questions(loaded.processor, dataset.max_test, 0, dataset.name, *split)
        data.make_calibration = lambda: _questions_calibration(loaded, 128, 0, *split)
        return data
    if isinstance(dataset, AudioFolder) and kind in ("speech_seq2seq", "speech_ctc"):
        rate = getattr(loaded.processor, "sampling_rate", None)
        return _speech(kind, dataset.load_utterances(rate), loaded, dataset.name)
    raise ConfigError(
        "dataset",
        f"{getattr(dataset, 'name', type(dataset).__name__)} does not fit a {kind} model ({loaded.info.name}); "
        f"use {FITTING.get(kind, 'a text dataset')}",
    )


def _from_text(kind: str, dataset: TextDataset, loaded: Any, progress: bool) -> TaskData:
    data = _evaluated(kind, dataset, loaded, progress)
    if dataset.calibration_windows > 0:
        data.make_calibration = lambda: _calibration(kind, data, dataset, loaded, progress)
    return data


def _calibration(kind: str, data: TaskData, dataset: TextDataset, loaded: Any, progress: bool):
    """Examples of the same task that are never evaluated, for GPTQ and AWQ (``dataset.calibration_windows``
    of them): masked windows after the evaluated ones, other passages with words dropped, other
    paragraphs, other sentences spoken. A text too short for any gives None (GPTQ then says so)."""
    n, tok, seed = dataset.calibration_windows, loaded.tokenizer, dataset.task_seed + 1
    text = dataset.read_text() if kind != "image_text_to_text" else ""
    try:
        if kind == "masked_lm":
            from pathlib import Path

            from modelxray.data.text_tasks import masked_body

            ids = tokenize_cached(text, tok, Path(_cache(dataset)) / "tokens")
            rest = ids[data.n_examples * masked_body(tok, dataset.seq_len) :]
            windows = masked_windows(rest, tok, dataset.seq_len, n, dataset.mask_rate, seed, dataset.name).windows
            origin = "masked windows after the evaluated ones"
        elif kind == "seq2seq_lm":
            evaluated = frozenset(data.meta["references"])
            pairs = denoising_pairs(text, n, dataset.drop_rate, seed, exclude=evaluated)
            windows = seq2seq_windows(pairs, tok, data.meta["prompt"], dataset.seq_len, dataset.seq_len, "", "").windows
            origin = f"other passages with {dataset.drop_rate:.0%} of words dropped"
        elif kind == "speech_seq2seq":
            from modelxray.data.speech import spoken_sentences

            utts = spoken_sentences(
                text,
                n,
                seed=seed,
                voice=dataset.speech_voice,
                words_per_minute=dataset.speech_words_per_minute,
                sample_rate=data.meta["sample_rate"],
                cache_dir=dataset.cache_dir,
                progress=progress,
                exclude=frozenset(data.meta["references"]),
            )
            windows = _speech(kind, utts, loaded, dataset.name).windows
            origin = "other sentences spoken by espeak-ng"
        elif kind == "image_text_to_text":
            return _questions_calibration(loaded, n, seed)
        elif kind in ("sequence_classification", "token_classification"):
            from modelxray.data.text_tasks import passages

            evaluated = set(data.meta.get("texts", []))
            found = [p for p in passages(text, 8, 48) if p not in evaluated]
            rng = random.Random(seed)
            texts = [found[i] for i in sorted(rng.sample(range(len(found)), min(n, len(found))))]
            windows = classification_windows(texts, [0] * len(texts), tok, dataset.seq_len, "", "", []).windows
            origin = "paragraphs that are not evaluated"
        else:
            return None
    except ConfigError:
        return None
    return windows, f"{origin} ({dataset.name}, seed {seed})"


def _questions_calibration(loaded: Any, n: int, seed: int, test_fraction: float = 0.25, split_seed: int = 0):
    """A vision-language model's calibration: ``n`` questions about digits of the train split."""
    from modelxray.data.image_questions import digit_questions

    data = digit_questions(loaded.processor, n, seed, "digits", test_fraction, split_seed, part="train")
    return data.windows, f"questions about digits of the train split (seed {seed})"


def _evaluated(kind: str, dataset: TextDataset, loaded: Any, progress: bool) -> TaskData:
    tok, model, n, seed = loaded.tokenizer, loaded.model, dataset.examples, dataset.task_seed
    name = dataset.name
    if kind == "image_text_to_text":  # questions about images: the text dataset's count and seed
        from modelxray.data.image_questions import digit_questions

        return digit_questions(loaded.processor, n, seed, "digits")
    if kind == "masked_lm":
        text = dataset.read_text()
        from pathlib import Path

        ids = tokenize_cached(text, tok, Path(_cache(dataset)) / "tokens")
        return masked_windows(ids, tok, dataset.seq_len, n, dataset.mask_rate, seed, name)
    if kind == "seq2seq_lm":
        pairs = denoising_pairs(dataset.read_text(), n, dataset.drop_rate, seed)
        prompt = decoder_prompt(model.config, getattr(model, "generation_config", None))
        desc = (
            f"{len(pairs)} passages of {name} with a seeded {dataset.drop_rate:.0%} of words dropped from the "
            "source; the target is the whole passage"
        )
        return seq2seq_windows(pairs, tok, prompt, dataset.seq_len, dataset.seq_len, name, desc)
    if kind == "sequence_classification":
        if name != "pydoc_topics":
            raise ConfigError("dataset", f"{name} has no labels; use {FITTING[kind]}")
        from pydoc_data.topics import topics

        texts, labels, names = topic_paragraphs(topics, _num_labels(model), n, seed)
        desc = f"{len(texts)} paragraphs of the Python docs labelled by their topic ({len(names)} topics)"
        return classification_windows(texts, labels, tok, dataset.seq_len, name, desc, names)
    if kind == "token_classification":
        import random

        from modelxray.data.text_tasks import passages

        found = passages(dataset.read_text(), 8, 48)
        rng = random.Random(seed)
        texts = [found[i] for i in sorted(rng.sample(range(len(found)), min(n, len(found))))]
        return tagged_windows(texts, tok, dataset.seq_len, min(_num_labels(model), 5), name)
    if kind in ("speech_seq2seq", "speech_ctc"):
        from modelxray.data.speech import spoken_sentences

        rate = int(getattr(loaded.processor, "sampling_rate", 16000) or 16000)
        utts = spoken_sentences(
            dataset.read_text(),
            n,
            seed=seed,
            voice=dataset.speech_voice,
            words_per_minute=dataset.speech_words_per_minute,
            sample_rate=rate,
            cache_dir=dataset.cache_dir,
            name=f"{name} spoken",
            progress=progress,
        )
        return _speech(kind, utts, loaded, f"{name} (spoken by espeak-ng)")
    raise ConfigError("dataset", f"no examples can be built for a {kind} model from {name}")


def _speech(kind: str, utterances: Any, loaded: Any, name: str) -> TaskData:
    from modelxray.data.speech_tasks import ctc_examples, whisper_windows

    if kind == "speech_ctc":
        return ctc_examples(utterances, name)
    model = loaded.model
    prompt = decoder_prompt(model.config, getattr(model, "generation_config", None))
    prompt = _whisper_prompt(loaded.tokenizer, prompt)
    max_target = int(getattr(model.config, "max_target_positions", 448) or 448)
    return whisper_windows(utterances, loaded.processor, loaded.tokenizer, prompt, min(max_target, 128), name)


def _whisper_prompt(tokenizer: Any, prompt: list[int]) -> list[int]:
    """Whisper's decoder prompt: start of transcript, then English, transcribe and no timestamps where
    the tokenizer knows those tokens (a real Whisper tokenizer does)."""
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    for token in ("<|en|>", "<|transcribe|>", "<|notimestamps|>"):
        if token in vocab and vocab[token] not in prompt:
            prompt = [*prompt, int(vocab[token])]
    return prompt


def _label_ids(labels: list[str], model: Any, path: str) -> tuple[list[int], list]:
    """Label names mapped through the model's ``label2id`` (or class indices), checked against its
    number of labels."""
    config = getattr(model, "config", None)
    label2id = {str(k).lower(): int(v) for k, v in (getattr(config, "label2id", None) or {}).items()}
    n = _num_labels(model)
    out = []
    for value in labels:
        key = value.strip().lower()
        if key in label2id:
            out.append(label2id[key])
        elif key.lstrip("-").isdigit() and 0 <= int(key) < n:
            out.append(int(key))
        else:
            known = ", ".join(sorted(label2id)[:8])
            raise ConfigError(
                "dataset.path", f"{path}: label {value!r} is neither one of the model's labels ({known}) nor 0..{n - 1}"
            )
    id2label = getattr(config, "id2label", None) or {}
    return out, [str(id2label.get(i, i)) for i in range(n)]


TEXT_INPUT_KINDS = ("masked_lm", "seq2seq_lm", "sequence_classification", "token_classification")


def task_batch(batch: Any, kind: str, key: str) -> dict:
    """One batch of a text, speech or vision-language model's loader as a mapping of its inputs and
    ``labels``: a mapping (a dict, a tokenizer's ``BatchEncoding``, a ``datasets`` batch), or for a
    text model a ``TensorDataset``'s ``(input_ids, labels)`` or ``(input_ids, attention_mask, labels)``."""
    from collections.abc import Mapping

    if isinstance(batch, Mapping) and "labels" in batch:
        return dict(batch)
    if isinstance(batch, (list, tuple)) and kind in TEXT_INPUT_KINDS and len(batch) in (2, 3):
        names = ("input_ids", "labels") if len(batch) == 2 else ("input_ids", "attention_mask", "labels")
        return dict(zip(names, batch))
    from modelxray.data.loader_data import describe_batch

    shown = describe_batch(batch) + (" and no labels" if isinstance(batch, Mapping) else "")
    tuples = " or (input_ids, labels), (input_ids, attention_mask, labels)" if kind in TEXT_INPUT_KINDS else ""
    raise ConfigError(
        key, f"yields {shown}; a {kind} model's DataLoader yields mappings of its inputs and labels{tuples}"
    )


def task_data_from_batches(loaded: Any, batches: Any, key: str = "dataloader") -> TaskData:
    """A user's DataLoader of a text, speech or vision-language model's batches (Hugging Face style
    mappings: the model's inputs and ``labels``, -100 = not scored) as windows: a seq2seq model's
    decoder input is its labels shifted behind the start token, and a vision-language model's labels
    are shifted onto the positions that predict them, as transformers does in training."""
    import torch

    from modelxray.metrics.windows import IGNORE, NamedTensors, Window

    kind, model = loaded.kind, loaded.model
    if kind == "speech_ctc":
        raise ConfigError(key, "a CTC speech model is scored by transcripts: use dataset=audio_folder")
    windows = []
    for raw in batches:
        batch = task_batch(raw, kind, key)
        labels = torch.as_tensor(batch["labels"])
        inputs = {k: torch.as_tensor(v) for k, v in batch.items() if k != "labels"}
        if kind in ("seq2seq_lm", "speech_seq2seq") and "decoder_input_ids" not in inputs:
            inputs["decoder_input_ids"] = model.prepare_decoder_input_ids_from_labels(labels=labels)
        primary = "decoder_input_ids" if "decoder_input_ids" in inputs else "input_ids"
        for row in range(labels.shape[0]):
            named = NamedTensors({k: v[row] for k, v in inputs.items()})
            named.primary = primary
            target = labels[row].reshape(-1) if labels.dim() > 1 else labels[row : row + 1]
            if kind == "image_text_to_text":  # a causal model: the logits at t predict label t + 1
                target = torch.cat([target[1:], target.new_full((1,), IGNORE)])
            windows.append(Window(named, target.long()))
    if not windows:
        raise ConfigError(key, "the DataLoader gave no batches")
    n = sum(int((w.targets != IGNORE).sum()) for w in windows)
    desc = f"{len(windows)} examples from your DataLoader ({n:,} scored positions)"
    return TaskData("dataloader", loaded.task, windows, desc, len(windows), {})
