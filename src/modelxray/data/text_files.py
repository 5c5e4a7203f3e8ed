"""Local text files chosen by glob patterns, joined in sorted path order."""

from __future__ import annotations

import codecs
import glob
import os
from dataclasses import dataclass, field
from typing import Any

from modelxray.core.errors import ConfigError
from modelxray.core.schema import REQUIRED
from modelxray.data.base import MIN_TOKENS, TextDataset, TokenData

MIN_TEXT = f"a text dataset needs at least {MIN_TOKENS} tokens (one input and one target): give more text"


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
            found = glob.glob(os.path.expanduser(pattern), recursive=True)
            if not found:
                raise ConfigError("paths", f"no file matches {pattern!r}")
            if not any(os.path.isfile(p) for p in found):
                raise ConfigError(
                    "paths",
                    f"{pattern!r} matches only directories ({', '.join(sorted(found)[:3])}); "
                    "match the text files in them, e.g. 'notes/**/*.md'",
                )
        try:
            codecs.lookup(self.encoding)
        except LookupError:
            raise ConfigError("encoding", f"{self.encoding!r} is no text encoding Python knows, e.g. utf-8") from None
        if all(os.path.getsize(p) == 0 for p in self.files()):
            raise ConfigError("paths", f"the text of {self._shown()} is empty (0 bytes); {MIN_TEXT}")

    @property
    def name(self) -> str:
        return "text_files"

    def _shown(self) -> str:
        return ", ".join(repr(p) for p in self.paths)

    def load(self, tokenizer: Any) -> TokenData:
        """The token stream, refused in one line when it is too short to score a single token."""
        data = super().load(tokenizer)
        if data.available_tokens < MIN_TOKENS:
            raise self.too_short(data.available_tokens)
        return data

    def too_short(self, n_tokens: int) -> Exception:
        return ConfigError("dataset.paths", f"the text of {self._shown()} is {n_tokens} token(s) long; {MIN_TEXT}")

    def files(self) -> list[str]:
        found = {p for pat in self.paths for p in glob.glob(os.path.expanduser(pat), recursive=True)}
        return sorted(p for p in found if os.path.isfile(p))

    def check_source(self) -> None:
        """Every file decoded before the model loads: one that is not ``encoding`` text is one line."""
        self.read_text()

    def read_text(self) -> str:
        parts = []
        for path in self.files():
            try:
                with open(path, encoding=self.encoding) as f:
                    parts.append(f.read())
            except UnicodeDecodeError as exc:
                raise ConfigError(
                    "dataset.paths",
                    f"{path} is not {self.encoding} text ({exc.reason}): save it as {self.encoding} or set dataset.encoding",
                ) from None
        return self.separator.join(parts)
