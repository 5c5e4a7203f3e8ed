"""The offline task pack: lm-eval tasks over the Python documentation (``tasks/*.yaml`` and their
JSON lines, built by ``scripts/build_lm_eval_tasks.py``), the analyzer's default and what runs where
the hub's tasks cannot be downloaded. lm-eval reads a task's data files relative to where it runs, so
the YAMLs are written, with their data files' absolute paths, into a folder lm-eval's ``TaskManager``
indexes (``include_path``): the tasks register through lm-eval's own mechanism."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

PACK = Path(__file__).with_name("tasks")
NAMES = ("pydoc_topic_mc", "pydoc_cloze")  # what the pack holds (each tasks/<name>.yaml)


def include_dir(cache_dir: str = "~/.cache/modelxray") -> Path:
    """The folder of the pack's task YAMLs pointing at its data files, written once per version."""
    text = {name: (PACK / f"{name}.yaml").read_text() for name in NAMES}
    digest = hashlib.sha256("".join(text.values()).encode() + str(PACK).encode()).hexdigest()[:12]
    out = Path(os.path.expanduser(cache_dir)) / "lm_eval_tasks" / digest
    if not all((out / f"{name}.yaml").exists() for name in NAMES):
        out.mkdir(parents=True, exist_ok=True)
        for name, yaml in text.items():
            data = PACK / f"{name}.jsonl"
            (out / f"{name}.yaml").write_text(yaml.replace(f"test: {name}.jsonl", f"test: {data}"))
    return out
