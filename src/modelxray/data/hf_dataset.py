"""``dataset=hf``: the text column of any Hugging Face dataset, from the hub, from the local datasets
cache when the hub cannot be reached, or from local files (parquet, JSON lines, JSON, CSV, or a
folder written by ``save_to_disk``). The rows of the split (sliced as ``load_dataset`` slices it:
``validation[:100]``, ``train[:10%]``) are joined into one text, which is tokenized and cut into
windows like every text dataset. The ``wikitext2`` and ``c4`` presets are this dataset with their
paths filled in."""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from modelxray.core.errors import ConfigError, require_library
from modelxray.core.schema import REQUIRED
from modelxray.data.base import TextDataset

_OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
# a data file's suffix -> the datasets builder that reads it
FILE_BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv", ".txt": "text"}
SPLIT = re.compile(r"^(?P<name>[\w.-]+)(?:\[(?P<start>-?\d+%?)?:(?P<stop>-?\d+%?)?\])?$")


def hub_offline() -> bool:
    """True when the user said so (HF_*_OFFLINE) or the hub's name does not resolve."""
    if any(os.environ.get(v, "").lower() in ("1", "true", "yes", "on") for v in _OFFLINE_VARS):
        return True
    import socket

    try:
        socket.getaddrinfo("huggingface.co", 443)
        return False
    except OSError:
        return True


@contextlib.contextmanager
def datasets_cache_only():
    """The datasets library reading its local cache alone while the hub cannot be reached (no
    retries against it); yields where that cache is, for the message when it lacks the data."""
    import datasets

    was = datasets.config.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = True
    try:
        yield os.environ.get("HF_DATASETS_CACHE", "~/.cache/huggingface/datasets")
    finally:
        datasets.config.HF_HUB_OFFLINE = was


# what the datasets library raises when neither the hub nor the cache holds the data
NOT_CACHED = (ConnectionError, FileNotFoundError, OSError)


def parse_split(split: str) -> tuple[str, str | None, str | None]:
    """``validation[:100]`` -> ("validation", None, "100"); a ConfigError for what is no split."""
    match = SPLIT.match(split.replace(" ", ""))
    if match is None:
        raise ConfigError(
            "dataset.split", f"{split!r} is no split: use a name with an optional slice, e.g. validation[:100]"
        )
    return match["name"], match["start"], match["stop"]


def _index(bound: str | None, n: int, default: int) -> int:
    if bound is None:
        return default
    value = round(n * int(bound[:-1]) / 100) if bound.endswith("%") else int(bound)
    return max(0, min(n, value + n if value < 0 else value))


@dataclass
class HFDataset(TextDataset):
    # a hub id (wikitext, allenai/c4), a data file (.parquet, .jsonl, .json, .csv, .txt) or a folder
    # (written by save_to_disk, or holding data files)
    path: str = field(default="", metadata=REQUIRED)
    subset: str | None = None  # the dataset's subset (load_dataset's name), e.g. wikitext-2-raw-v1
    split: str = "test"  # a split, sliced as load_dataset slices it: validation[:100], train[:10%]
    column: str = "text"  # the column holding the text
    separator: str = "\n\n"  # between rows
    revision: str | None = None  # hub datasets: a branch, tag or commit
    # hub datasets of many files (c4): the ones to read, a list or {split: file}, e.g.
    # {validation: en/c4-validation.00000-of-00008.json.gz}
    data_files: dict | list | None = None

    def validate(self) -> None:
        super().validate()
        if not self.path:
            raise ConfigError("path", "is required: a hub dataset id, a data file or a folder")
        require_library("dataset", "dataset=hf", "datasets", "datasets", "datasets")
        parse_split(self.split)
        local = self._local()
        looks_local = self.path.startswith((".", "/", "~")) or Path(self.path).suffix in FILE_BUILDERS
        if looks_local and local is None:
            raise ConfigError("dataset.path", f"{self.path!r} does not exist: give a data file, a folder or a hub id")

    @property
    def name(self) -> str:
        return f"hf:{self.path}" + (f"/{self.subset}" if self.subset else "") + f"[{self.split}]"

    def source(self) -> tuple[str, str]:
        """MLflow's dataset source: the local file or folder, or the hub dataset with its subset and split."""
        local = self._local()
        if local is not None:
            return "local", str(local)
        return "hugging_face", f"{self.path}" + (f"/{self.subset}" if self.subset else "") + f":{self.split}"

    def _local(self) -> Path | None:
        path = Path(os.path.expanduser(self.path))
        return path if path.exists() else None

    def check_source(self) -> None:
        """Read before the model loads: a split that does not exist, a column the rows lack or a hub
        dataset neither reachable nor cached is one line before any weight is read."""
        self.rows()

    def rows(self):
        """The split's rows (a ``datasets.Dataset``), checked: the split exists and holds ``column``."""
        if getattr(self, "_rows", None) is None:
            self._rows = self._read_rows()
        return self._rows

    def _read_rows(self):
        local = self._local()
        if local is not None and local.is_dir() and _saved_to_disk(local):
            rows = self._from_disk(local)
        elif local is not None:
            rows = self._load(self._builder(local), data_files=str(local) if local.is_file() else None, data_dir=None)
        else:
            rows = self._from_hub()
        if self.column not in rows.column_names:
            raise ConfigError(
                "dataset.column",
                f"{self.name} has no column {self.column!r}; its columns: {', '.join(rows.column_names)}",
            )
        return rows

    def read_text(self) -> str:
        rows = self.rows()
        texts = [t for t in rows[self.column] if isinstance(t, str)]
        if not texts:
            raise ConfigError("dataset.column", f"{self.name}'s column {self.column!r} holds no text")
        return self.separator.join(texts)

    # -- sources -------------------------------------------------------------------------------
    def _builder(self, local: Path) -> str:
        if local.is_dir():
            suffixes = {p.suffix for p in local.rglob("*") if p.suffix in FILE_BUILDERS}
            if not suffixes:
                raise ConfigError(
                    "dataset.path",
                    f"folder {self.path!r} holds no dataset written by save_to_disk and no data file "
                    f"({', '.join(FILE_BUILDERS)})",
                )
            return FILE_BUILDERS[sorted(suffixes)[0]]
        builder = FILE_BUILDERS.get(local.suffix)
        if builder is None:
            raise ConfigError(
                "dataset.path", f"{self.path!r} is no data file datasets reads ({', '.join(FILE_BUILDERS)})"
            )
        return builder

    def _load(self, path: str, data_files=None, data_dir=None):
        """``load_dataset`` of the split, a missing split as one line naming the ones there are."""
        from datasets import load_dataset

        if data_dir is None and data_files is None and self._local() is not None and self._local().is_dir():
            data_dir = str(self._local())
        try:
            return load_dataset(
                path,
                self.subset,
                split=self.split,
                revision=self.revision,
                data_files=data_files if data_files is not None else self.data_files,
                data_dir=data_dir,
            )
        except ValueError as exc:
            text = str(exc)
            if "Unknown split" in text or "Bad split" in text:
                raise ConfigError("dataset.split", f"{self.name}: {text.splitlines()[0]}") from None
            raise

    def _from_disk(self, folder: Path):
        from datasets import DatasetDict, load_from_disk

        saved = load_from_disk(str(folder))
        name, start, stop = parse_split(self.split)
        if isinstance(saved, DatasetDict):
            if name not in saved:
                raise ConfigError(
                    "dataset.split", f"{self.name}: no split {name!r}; its splits: {', '.join(saved.keys())}"
                )
            saved = saved[name]
        n = len(saved)
        return saved.select(range(_index(start, n, 0), max(_index(start, n, 0), _index(stop, n, n))))

    def _from_hub(self):
        """From the hub, or from the local cache when the hub cannot be reached."""
        if not hub_offline():
            return self._load(self.path)
        with datasets_cache_only() as cache:
            try:
                return self._load(self.path)
            except NOT_CACHED as exc:
                raise ConfigError(
                    "dataset.path",
                    f"{self.path!r}{f' ({self.subset})' if self.subset else ''} is not in the Hugging Face datasets "
                    f"cache ({cache}) and the hub cannot be reached (offline): load it once while online, or give a "
                    f"local file or folder ({type(exc).__name__})",
                ) from None


def _saved_to_disk(folder: Path) -> bool:
    """A folder written by ``save_to_disk`` (a Dataset's state, or a DatasetDict's splits)."""
    return (folder / "dataset_info.json").exists() or (folder / "dataset_dict.json").exists()
