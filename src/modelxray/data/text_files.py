"""Local text files chosen by glob patterns, joined in sorted path order."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field

from modelxray.core.errors import ConfigError
from modelxray.core.schema import REQUIRED
from modelxray.data.base import TextDataset


@dataclass
class TextFiles(TextDataset):
    paths: list[str] = field(default_factory=list, metadata=REQUIRED)  # files or glob patterns
    encoding: str = "utf-8"
    separator: str = "\n\n"

    def validate(self) -> None:
        super().validate()
        if not self.paths:
            raise ConfigError(
                "paths", "is empty: give one or more files or glob patterns, e.g. dataset.paths=[docs/*.txt]"
            )
        for pattern in self.paths:
            if not glob.glob(os.path.expanduser(pattern), recursive=True):
                raise ConfigError("paths", f"no file matches {pattern!r}")

    @property
    def name(self) -> str:
        return "text_files"

    def files(self) -> list[str]:
        found = {p for pat in self.paths for p in glob.glob(os.path.expanduser(pat), recursive=True)}
        return sorted(p for p in found if os.path.isfile(p))

    def read_text(self) -> str:
        parts = []
        for path in self.files():
            try:
                with open(path, encoding=self.encoding) as f:
                    parts.append(f.read())
            except UnicodeDecodeError as exc:
                raise ConfigError(path, f"is not {self.encoding} text ({exc.reason}); set dataset.encoding") from None
        return self.separator.join(parts)
