"""The user's image files, read so that one that is no image (or a cut copy) is one line naming it.

Pillow reads only the header when it opens a file; ``verify`` also walks a PNG's chunks and their
checksums, so a truncated PNG is found before any model loads (``check_image_files``). Other formats
show a cut only when decoded, which ``read_image`` reports the same way.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path

from modelxray.core.errors import ConfigError

# what Pillow raises for a file it cannot read (UnidentifiedImageError is an OSError)
IMAGE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, struct.error)


def check_image_files(paths: Iterable[Path], key: str) -> None:
    """Every file opens as an image and passes Pillow's ``verify``: headers only, no pixel decoded."""
    from PIL import Image

    for path in paths:
        try:
            with Image.open(path) as im:
                im.verify()
        except IMAGE_ERRORS as exc:
            raise ConfigError(key, unreadable(path, exc)) from None


def read_image(path: Path, key: str, mode: str | None = None):
    """The decoded image (converted to ``mode`` when given), or a ConfigError naming the file."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            im.load()
            return im.convert(mode) if mode else im.copy()
    except IMAGE_ERRORS as exc:
        raise ConfigError(key, unreadable(path, exc)) from None


def unreadable(path: Path, exc: Exception) -> str:
    from PIL import UnidentifiedImageError

    why = "not an image file Pillow can read" if isinstance(exc, UnidentifiedImageError) else _first_line(exc)
    return f"{str(path)!r} is no readable image ({why}); remove it or replace it with a good copy"


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
