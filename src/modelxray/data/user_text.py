"""A user's own examples for text tasks: labelled texts (CSV or JSONL of text and label) for a text
classifier, (source, target) pairs (JSONL) for a seq2seq model, and questions about images (image
path, prompt, answer) for a generative vision-language model. Read whole before the model loads
(``check_source``); every bad file or row is one line naming ``dataset.path``, the file and its line,
and what would fix it."""

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
from modelxray.data.image_files import check_image_files
from modelxray.data.source_checks import KindsThatRead

TEXT_KEYS = ("text", "sentence", "source")
LABEL_KEYS = ("label", "labels", "class")


def _records(path: str) -> list[tuple[int, dict]]:
    """(line number, record) of each row of a CSV (a header row naming the columns) or JSONL file."""
    p = Path(os.path.expanduser(path))
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("dataset.path", f"{path} is not UTF-8 text ({exc.reason}): save it as UTF-8") from None
    records = _jsonl_records(path, text) if p.suffix == ".jsonl" else _csv_records(path, text)
    if not records:
        raise ConfigError("dataset.path", f"{path} holds no rows: write one example per line")
    return records


def _jsonl_records(path: str, text: str) -> list[tuple[int, dict]]:
    """One JSON object per non-blank line, each with its line number."""
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                "dataset.path", f"{path} line {number} is not JSON ({exc.msg}): fix or remove it"
            ) from None
        if not isinstance(record, dict):
            raise ConfigError(
                "dataset.path", f"{path} line {number} is not an object with named fields: write one {{...}} per line"
            )
        records.append((number, record))
    return records


def _csv_records(path: str, text: str) -> list[tuple[int, dict]]:
    """The rows under the header row, each with the line it ends on (a quoted field may span lines).
    A row of more fields than the header is refused: an unquoted comma would cut its text silently."""
    reader = csv.DictReader(text.splitlines())
    records = []
    for row in reader:
        if None in row:
            n = len(reader.fieldnames or ()) + len(row[None])
            raise ConfigError(
                "dataset.path",
                f"{path} line {reader.line_num} has {n} fields and the header {len(reader.fieldnames or ())}: "
                'quote a value that holds a comma ("a, b")',
            )
        records.append((reader.line_num, row))
    return records


def _rows(path: str, wanted: tuple[tuple[str, ...], ...]) -> list[tuple[int, tuple[str, ...]]]:
    """(line number, one value per ``wanted`` column: the first of its accepted names the row has)
    for every row of the file, each checked to hold every column."""
    out = []
    for i, (number, rec) in enumerate(_records(path), 1):
        values = []
        for names in wanted:
            name = next((n for n in names if n in rec), None)
            if name is None or rec[name] in (None, ""):
                fields = ", ".join(str(k) for k in rec if k is not None) or "none"
                raise ConfigError(
                    "dataset.path",
                    f"{path} row {i} has no {' or '.join(names)} field (line {number}; its fields: {fields}): "
                    "add it, or remove the row",
                )
            values.append(str(rec[name]))
        out.append((number, tuple(values)))
    return out


@dataclass
class _UserFile(KindsThatRead, Configurable):
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

    def check_source(self) -> None:
        """Every row read before the model loads: a bad line is one line naming it, not a traceback
        after the weights are in memory."""
        self.read()


@dataclass
class LabelledText(_UserFile):
    """Texts and their labels (``text``, ``label`` columns): a text classifier's test set. Labels are
    class names matched to the model's ``label2id``, or class indices."""

    modality: ClassVar[str] = "text"  # what its examples are: a model of another kind cannot use them
    kinds: ClassVar[tuple[str, ...]] = ("sequence_classification",)
    holds: ClassVar[str] = "labelled texts"

    @property
    def name(self) -> str:
        return f"labelled_text:{Path(self.path).name}"

    def read(self) -> tuple[list[str], list[str]]:
        rows = [values for _, values in _rows(self.path, (TEXT_KEYS, LABEL_KEYS))][: self.max_examples]
        return [r[0] for r in rows], [r[1] for r in rows]


@dataclass
class TextPairs(_UserFile):
    """(source, target) pairs (``source``, ``target`` fields): a seq2seq model's test set."""

    modality: ClassVar[str] = "text"  # what its examples are: a model of another kind cannot use them
    kinds: ClassVar[tuple[str, ...]] = ("seq2seq_lm",)
    holds: ClassVar[str] = "source/target pairs"

    @property
    def name(self) -> str:
        return f"text_pairs:{Path(self.path).name}"

    def read(self) -> list[tuple[str, str]]:
        rows = _rows(self.path, (("source", "input", "text"), ("target", "output", "summary")))
        return [(r[0], r[1]) for _, r in rows[: self.max_examples]]


@dataclass
class ImageQuestions(_UserFile):
    """Questions about images (``image``, ``prompt``, ``answer`` fields; the image path relative to
    the file's folder): a generative vision-language model's test set, scored on the answers."""

    modality: ClassVar[str] = "images"  # what its examples are: a model of another kind cannot use them
    kinds: ClassVar[tuple[str, ...]] = ("image_text_to_text",)
    holds: ClassVar[str] = "questions about images"

    @property
    def name(self) -> str:
        return f"image_questions:{Path(self.path).name}"

    def check_source(self) -> None:
        """Every row, and each image it names opened as an image (headers only), before the model loads."""
        for row, where, _, _ in self._questions():
            try:
                check_image_files([where], "dataset.path")
            except ConfigError as exc:
                raise ConfigError(exc.key, f"{self.path} {row}: {exc.message}") from None

    def read(self) -> list[tuple[Path, str, str]]:
        return [(where, prompt, answer) for _, where, prompt, answer in self._questions()]

    def _questions(self) -> list[tuple[str, Path, str, str]]:
        """(``row 2 (line 3)``, image file, prompt, answer) of the first ``max_examples`` rows, each
        image there."""
        rows = _rows(self.path, (("image", "image_path", "file"), ("prompt", "question"), ("answer", "target")))
        folder = Path(os.path.expanduser(self.path)).parent
        out = []
        for i, (number, (image, prompt, answer)) in enumerate(rows[: self.max_examples], 1):
            where = Path(os.path.expanduser(image))
            where = where if where.is_absolute() else folder / where
            if not where.is_file():
                raise ConfigError(
                    "dataset.path",
                    f"{self.path} row {i}: image {image!r} is not in {folder} (line {number}): fix the path",
                )
            out.append((f"row {i} (line {number})", where, prompt, answer))
        return out
