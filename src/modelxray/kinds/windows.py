"""Kinds scored on windows of examples built for them (``TaskData``): masked LMs, seq2seq models,
text and token classifiers, speech recognisers and generative vision-language models.

A text dataset (``pydoc_topics`` by default, ``text_files``...) becomes each kind's own examples
(masked windows, denoising pairs, labelled paragraphs, tagged words, spoken sentences), so
``model=hf model.name_or_path=DIR`` runs on every kind offline; a user's dataset of the kind's own
examples (``labelled_text``, ``text_pairs``, ``audio_folder``, ``image_questions``) is read as it is."""

from __future__ import annotations

from typing import Any, ClassVar

from modelxray.core.errors import ConfigError
from modelxray.kinds.base import Kind


class WindowsKind(Kind):
    family: ClassVar[str] = (
        "encoders, seq2seq models, speech recognisers, audio classifiers and generative vision-language models"
    )
    needs_tokenizer: ClassVar[bool] = True
    named_in_run: ClassVar[bool] = True
    modalities: ClassVar[tuple[str, ...]] = ("text",)
    # a user's DataLoader may yield (input_ids, labels) or (input_ids, attention_mask, labels) tuples
    reads_id_tuples: ClassVar[bool] = False
    decoder_from_labels: ClassVar[bool] = False  # its decoder input is its labels shifted behind the start token
    labels_predicted_next: ClassVar[bool] = False  # a causal model: the logits at t predict label t + 1

    def reference_work(self):
        from functools import partial

        from modelxray.measure.reference_outputs import task_reference

        return partial(task_reference, outputs=self.generated_outputs())

    def degenerate_signs(self, metrics: dict, subject: Any, uniform_share: float) -> list[str]:
        """Perplexity-scored kinds: a perplexity near the vocabulary's size, or greedy outputs that are all
        empty; labelled ones: an accuracy no better than always answering the commonest label of the
        scored positions."""
        from modelxray.metrics.degenerate import (
            chance_signs,
            commonest_share,
            empty_output_signs,
            language_model_signs,
        )

        if self.scored_by == "perplexity":
            from modelxray.kinds.causal_lm import output_vocab

            vocab = output_vocab(subject.model)
            signs = language_model_signs(metrics.get("perplexity", 0.0), vocab, uniform_share)
            empty = metrics.get("empty_output_share", 0.0)  # a seq2seq model's greedy outputs
            return signs + empty_output_signs(empty, int(metrics.get("generated_examples", 0)))
        windows = getattr(subject.data, "windows", None) or []
        if "accuracy" not in metrics or not windows:
            return []
        import torch

        targets = torch.cat([w.targets.reshape(-1) for w in windows])
        n = int((targets >= 0).sum())
        return chance_signs("accuracy", round(metrics["accuracy"] * n), n, commonest_share(targets))

    def trial_inputs(self, subject: Any, full: bool = False) -> Any:
        """The first example as its scored window holds it (text, audio features, image and prompt)."""
        from modelxray.measure.scoring import model_device
        from modelxray.measure.task_outputs import example_batch

        if subject.data is None:
            return None
        return example_batch(subject, 1).to(model_device(subject.model))

    def generated_outputs(self) -> Any:
        """What it generates beyond its scored windows (``measure.task_outputs``): greedy outputs where
        its data has a prompt."""
        from modelxray.measure.task_outputs import generated_outputs

        return generated_outputs

    # -- data ----------------------------------------------------------------------------------
    def examples_for(self, dataset: Any, loaded: Any, progress: bool = False) -> Any:
        """``dataset`` as this kind's examples, or a one-line ConfigError naming the datasets that fit."""
        from modelxray.data.base import TextDataset

        if isinstance(dataset, TextDataset):
            data = self.from_text(dataset, loaded, progress)
            if dataset.calibration_windows > 0:
                data.make_calibration = lambda: self._calibration(data, dataset, loaded, progress)
            return data
        data = self.from_dataset(dataset, loaded)
        if data is None:
            raise ConfigError(
                "dataset",
                f"{getattr(dataset, 'name', type(dataset).__name__)} does not fit a {self.name} model "
                f"({loaded.info.name}); use {self.fitting}",
            )
        return data

    def from_text(self, dataset: Any, loaded: Any, progress: bool) -> Any:
        """The evaluated examples this kind makes of a text dataset."""
        raise ConfigError("dataset", f"no examples can be built for a {self.name} model from {dataset.name}")

    def from_dataset(self, dataset: Any, loaded: Any) -> Any:
        """The examples of a dataset of this kind's own examples, or None when it holds none."""
        return None

    def calibration_from_text(self, data: Any, dataset: Any, loaded: Any, progress: bool, n: int, seed: int):
        """(calibration windows, where they come from) of a text dataset, never the evaluated ones."""
        return None

    def _calibration(self, data: Any, dataset: Any, loaded: Any, progress: bool):
        """Examples of the same task that are never evaluated, for GPTQ and AWQ
        (``dataset.calibration_windows`` of them). A text too short for any gives None (GPTQ says so)."""
        n, seed = dataset.calibration_windows, dataset.task_seed + 1
        try:
            found = self.calibration_from_text(data, dataset, loaded, progress, n, seed)
        except ConfigError:
            return None
        if found is None:
            return None
        windows, origin = found
        return windows, f"{origin} ({dataset.name}, seed {seed})"

    def data_from_batches(self, loaded: Any, batches: Any, key: str, image_shape: Any = None) -> Any:
        """A user's DataLoader of Hugging Face style batches (the model's inputs and ``labels``, -100 =
        not scored) as windows: a seq2seq model's decoder input is its labels shifted behind the start
        token, and a causal model's labels are shifted onto the positions that predict them, as
        transformers does in training."""
        import torch

        from modelxray.data.text_tasks import TaskData
        from modelxray.metrics.windows import IGNORE, NamedTensors, Window

        windows = []
        for raw in batches:
            batch = self.batch(raw, key)
            labels = torch.as_tensor(batch["labels"])
            inputs = {k: torch.as_tensor(v) for k, v in batch.items() if k != "labels"}
            if self.decoder_from_labels and "decoder_input_ids" not in inputs:
                inputs["decoder_input_ids"] = loaded.model.prepare_decoder_input_ids_from_labels(labels=labels)
            primary = "decoder_input_ids" if "decoder_input_ids" in inputs else "input_ids"
            for row in range(labels.shape[0]):
                named = NamedTensors({k: v[row] for k, v in inputs.items()})
                named.primary = primary
                target = labels[row].reshape(-1) if labels.dim() > 1 else labels[row : row + 1]
                if self.labels_predicted_next:
                    target = torch.cat([target[1:], target.new_full((1,), IGNORE)])
                windows.append(Window(named, target.long()))
        if not windows:
            raise ConfigError(key, "the DataLoader gave no batches")
        n = sum(int((w.targets != IGNORE).sum()) for w in windows)
        desc = f"{len(windows)} examples from your DataLoader ({n:,} scored positions)"
        return TaskData("dataloader", self.task, windows, desc, len(windows), {})

    def batch(self, batch: Any, key: str) -> dict:
        """One batch of a user's loader as a mapping of the model's inputs and ``labels``: a mapping (a
        dict, a tokenizer's ``BatchEncoding``, a ``datasets`` batch), or for a text model a
        ``TensorDataset``'s ``(input_ids, labels)`` or ``(input_ids, attention_mask, labels)``."""
        from collections.abc import Mapping

        if isinstance(batch, Mapping) and "labels" in batch:
            return dict(batch)
        if isinstance(batch, (list, tuple)) and self.reads_id_tuples and len(batch) in (2, 3):
            names = ("input_ids", "labels") if len(batch) == 2 else ("input_ids", "attention_mask", "labels")
            return dict(zip(names, batch))
        from modelxray.data.loader_data import describe_batch

        shown = describe_batch(batch) + (" and no labels" if isinstance(batch, Mapping) else "")
        tuples = " or (input_ids, labels), (input_ids, attention_mask, labels)" if self.reads_id_tuples else ""
        raise ConfigError(
            key, f"yields {shown}; a {self.name} model's DataLoader yields mappings of its inputs and labels{tuples}"
        )


def cache_dir(dataset: Any) -> str:
    import os
    from pathlib import Path

    return str(Path(os.path.expanduser(getattr(dataset, "cache_dir", "~/.cache/modelxray"))))


def num_labels(model: Any) -> int:
    return int(getattr(getattr(model, "config", None), "num_labels", 2) or 2)


def decoder_start(model: Any) -> list[int]:
    """The decoder prompt of an encoder-decoder model (its start tokens)."""
    from modelxray.data.text_tasks import decoder_prompt

    return decoder_prompt(model.config, getattr(model, "generation_config", None))


def sample_passages(text: str, n: int, seed: int, exclude: set | None = None) -> list[str]:
    """``n`` paragraphs of ``text`` (8 to 48 words), seeded, in their order, leaving out ``exclude``."""
    import random

    from modelxray.data.text_tasks import passages

    found = [p for p in passages(text, 8, 48) if p not in (exclude or set())]
    rng = random.Random(seed)
    return [found[i] for i in sorted(rng.sample(range(len(found)), min(n, len(found))))]
