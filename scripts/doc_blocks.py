"""Measured tables in the docs, written by the scripts that measure them: a block between
``<!-- measured: NAME by scripts/SCRIPT -->`` and ``<!-- end: NAME -->`` is replaced whole, so a
table cannot drift from the run that produced it. Imported by the measuring scripts."""

from __future__ import annotations

import re
from pathlib import Path


def begin(name: str, script: str) -> str:
    return f"<!-- measured: {name} by scripts/{script} (do not edit: rerun it) -->"


def end(name: str) -> str:
    return f"<!-- end: {name} -->"


def replace_block(text: str, name: str, script: str, body: str) -> str:
    """``text`` with block ``name``'s body replaced by ``body``; the block must exist once."""
    pattern = re.compile(re.escape(begin(name, script)) + r"\n.*?" + re.escape(end(name)), re.S)
    found = pattern.findall(text)
    if len(found) != 1:
        raise SystemExit(f"{name}: expected one block marked {begin(name, script)!r}, found {len(found)}")
    return pattern.sub(lambda _: f"{begin(name, script)}\n{body.strip()}\n{end(name)}", text)


def update(path: Path, blocks: dict[str, str], script: str, check: bool) -> list[str]:
    """Write ``blocks`` (name -> Markdown) into ``path``; with ``check``, write nothing and return the
    names of the blocks whose text differs from the file's."""
    text = path.read_text()
    new = text
    for name, body in blocks.items():
        new = replace_block(new, name, script, body)
    if check:
        return [n for n, b in blocks.items() if replace_block(text, n, script, b) != text]
    if new != text:
        path.write_text(new)
    return []
