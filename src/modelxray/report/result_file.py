"""One stage's Result on disk and back: ``results/<name>.json`` in the run directory.

Each analyzer's Result is saved the moment it finishes, so a run killed later (out of memory, a
scheduler's SIGKILL) keeps it, and a resumed run (``runtime.skip_finished``, ``runtime.resume``)
loads it instead of computing it again. Unlike ``analysis_results.json`` (what a person reads), this
file holds everything the report writer needs to draw the Result again: its typed measurements
(by type name, each through its own ``to_dict``/``from_dict``), its text files and its binary files
(base64). Plain JSON, never pickle: loading a run directory cannot execute code.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from modelxray.core.errors import ConfigError
from modelxray.core.files import write_file
from modelxray.core.result import Result
from modelxray.measure.energy import Energy
from modelxray.metrics.measurements import Latency, Memory, Quality, Speed, Throughput

RESULTS_DIR = "results"
FORMAT = 2  # a resumed run runs again the analyzers whose saved result has another format
_MEASUREMENT_TYPES = {cls.__name__: cls for cls in (Energy, Latency, Memory, Quality, Speed, Throughput)}


def result_path(out_dir: Path, name: str) -> Path:
    return Path(out_dir) / RESULTS_DIR / f"{name}.json"


class UnsafeEntry(ConfigError):
    """A saved result names a file outside the run folder: tampered with, or not ours."""


def check_entry(name: str, where: str) -> str:
    """``name`` if it is a relative path that stays inside the run folder (no absolute path, drive,
    ``..`` or backslash), else an ``UnsafeEntry`` naming it and the file that holds it."""
    from pathlib import PurePosixPath, PureWindowsPath

    posix, windows = PurePosixPath(name), PureWindowsPath(name)
    if (
        not name
        or "\\" in name
        or "\x00" in name
        or posix.is_absolute()
        or windows.is_absolute()
        or windows.drive
        or ".." in posix.parts
    ):
        raise UnsafeEntry(
            "runtime.resume",
            f"{where} names the file {name!r}, outside the run folder; a result file only names files "
            "inside it (was it edited, or copied from another store?): delete it to run that analyzer again",
        )
    return name


def _plain(obj: Any) -> Any:
    """JSON values. Non-finite floats stay floats: Python's json writes and reads NaN and Infinity,
    so a table keeps its numbers' types."""
    if isinstance(obj, float):
        return obj
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy and torch scalars
        return _plain(obj.item())
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    return str(obj)


def save_result(out_dir: Path, name: str, result: Result) -> Path:
    """Write ``results/<name>.json`` (atomically: a kill mid-write leaves the previous file or none)."""
    measurements = {}
    for key, m in result.measurements.items():
        kind = type(m).__name__
        if kind in _MEASUREMENT_TYPES:  # a user's own measurement type is kept in data only
            measurements[key] = {"type": kind, "value": m.to_dict()}
    payload = {
        "format": FORMAT,
        **result.to_json(),
        "texts": result.texts,
        "files": {k: base64.b64encode(v).decode("ascii") for k, v in result.files.items()},
        "measurements": measurements,
    }
    path = result_path(out_dir, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, json.dumps(_plain(payload)))
    return path


def load_result(path: Path, source: Any = None) -> Result:
    """A Result saved by ``save_result``, drawn by ``source`` (the analyzer of the resumed run)."""
    d = json.loads(Path(path).read_text())
    if d.get("format") != FORMAT:
        raise ValueError(f"{path}: result file format {d.get('format')!r}, expected {FORMAT}")
    result = Result(
        d["analyzer"],
        metrics={k: float(v) for k, v in d["metrics"].items() if v is not None},
        tables=d["tables"],
        data=d["data"],
        insights=list(d["insights"]),
        texts={check_entry(k, str(path)): v for k, v in d["texts"].items()},
        files={check_entry(k, str(path)): base64.b64decode(v) for k, v in d["files"].items()},
        error=d["error"],
        seconds=float(d["seconds"]),
        source=source,
    )
    for key, m in d["measurements"].items():
        result.measurements[key] = _MEASUREMENT_TYPES[m["type"]].from_dict(m["value"])
    return result
