"""The run's files are written whole or not at all: each goes to a temporary name beside it and is
renamed when complete, so a full disk or a file-size limit leaves no cut file behind (Pillow, for
one, leaves a truncated PNG when its last write fails), and the error names the file."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from modelxray.core.errors import OutputError


@contextmanager
def written_whole(path: str | Path) -> Iterator[Path]:
    """A temporary path to write ``path``'s content to (same suffix: savefig picks the format by it);
    renamed to ``path`` when the block ends, removed when writing failed (``OutputError``)."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.partial{path.suffix}")
    try:
        yield tmp
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OutputError(path, exc) from exc


def write_file(path: str | Path, content: str | bytes) -> None:
    """``content`` (text as UTF-8, or bytes) to ``path``, whole or not at all."""
    with written_whole(path) as tmp:
        if isinstance(content, str):
            tmp.write_text(content, encoding="utf-8")
        else:
            tmp.write_bytes(content)
