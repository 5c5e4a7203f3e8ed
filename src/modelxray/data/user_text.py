"""A user's own examples for text tasks: labelled texts (CSV or JSONL of text and label) for a text
classifier, (source, target) pairs (JSONL) for a seq2seq model, and questions about images (image
path, prompt, answer) for a generative vision-language model. Read whole at load; every bad
file or row is one line naming ``dataset.path`` and what would fix it."""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from modelxray.core.configurable import Configurable
from modelxray.core.errors import ConfigError
from modelxray.core.schema import REQUIRED

TEXT_KEYS = ("text", "sentence", "source")
LABEL_KEYS = ("label", "labels", "class")


def _rows(path: str, wanted: tuple[tuple[str, ...], ...]) -> list[tuple[str, ...]]:
    """Rows of a CSV (header row naming the columns) or JSONL file, one value per ``wanted`` column
    (the first of its accepted names that the file has)."""
    p = Path(os.path.expanduser(path))
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError("dataset.path", f"{path} is not UTF-8 text") from None
    if p.suffix == ".jsonl":
        records = []
        for i, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ConfigError("dataset.path", f"{path} line {i} is not JSON: {exc.msg}") from None
    else:
        records = list(csv.DictReader(text.splitlines()))
    if not records:
        raise ConfigError("dataset.path", f"{path} holds no rows")
    out = []
    for i, rec in enumerate(records, 1):
        if not isinstance(rec, dict):
            raise ConfigError("dataset.path", f"{path} row {i} is not an object with named fields")
        values = []
        for names in wanted:
            name = next((n for n in names if n in rec), None)
            if name is None or rec[name] in (None, ""):
                raise ConfigError("dataset.path", f"{path} row {i} has no {' or '.join(names)} field")
            values.append(str(rec[name]))
        out.append(tuple(values))
    return out


@dataclass
class _UserFile(Configurable):
    path: str = field(default="", metadata=REQUIRED)  # a .csv (with a header row) or .jsonl file
    max_examples: int | None = None  # the first N rows; null = all
    seq_len: int = 256  # tokens per text (longer texts are cut)

    def validate(self) -> None:
        self.require_positive("max_examples", allow_none=True)
        self.require_positive("seq_len")
        p = Path(os.path.expanduser(self.path))
        if not p.is_file():
            raise ConfigError("path", f"file {self.path!r} does not exist; give a .csv or .jsonl file")
        if p.suffix not in (".csv", ".jsonl"):
            raise ConfigError("path", f"{self.path!r} must be a .csv (with a header row) or .jsonl file")


@dataclass
class LabelledText(_UserFile):
    """Texts and their labels (``text``, ``label`` columns): a text classifier's test set. Labels are
    class names matched to the model's ``label2id``, or class indices."""

    modality: ClassVar[str] = "text"  # what its examples are: a model of another kind cannot use them

    @property
    def name(self) -> str:
        return f"labelled_text:{Path(self.path).name}"

    def read(self) -> tuple[list[str], list[str]]:
        rows = _rows(self.path, (TEXT_KEYS, LABEL_KEYS))[: self.max_examples]
        return [r[0] for r in rows], [r[1] for r in rows]


@dataclass
class TextPairs(_UserFile):
    """(source, target) pairs (``source``, ``target`` fields): a seq2seq model's test set."""

    modality: ClassVar[str] = "text"  # what its examples are: a model of another kind cannot use them

    @property
    def name(self) -> str:
        return f"text_pairs:{Path(self.path).name}"

    def read(self) -> list[tuple[str, str]]:
        rows = _rows(self.path, (("source", "input", "text"), ("target", "output", "summary")))
        return [(r[0], r[1]) for r in rows[: self.max_examples]]


@dataclass
class ImageQuestions(_UserFile):
    """Questions about images (``image``, ``prompt``, ``answer`` fields; the image path relative to
    the file's folder): a generative vision-language model's test set, scored on the answers."""

    modality: ClassVar[str] = "images"  # what its examples are: a model of another kind cannot use them

    @property
    def name(self) -> str:
        return f"image_questions:{Path(self.path).name}"

    def read(self) -> list[tuple[Path, str, str]]:
        rows = _rows(self.path, (("image", "image_path", "file"), ("prompt", "question"), ("answer", "target")))
        folder = Path(os.path.expanduser(self.path)).parent
        out = []
        for i, (image, prompt, answer) in enumerate(rows[: self.max_examples], 1):
            where = Path(os.path.expanduser(image))
            where = where if where.is_absolute() else folder / where
            if not where.is_file():
                raise ConfigError("dataset.path", f"{self.path} row {i}: image {image!r} is not in {folder}")
            out.append((where, prompt, answer))
        return out
