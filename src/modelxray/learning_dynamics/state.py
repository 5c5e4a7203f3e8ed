"""Save and load analysis state as JSON + npz, never pickle, so a run can be resumed or compared later.

``save_state(path, obj)`` writes ``path.json`` (the structure and every scalar) and ``path.npz``
(the arrays, loaded with ``allow_pickle=False``). Supported values: dict (string keys), list,
tuple, str, int, float (NaN and infinities included), bool, None, numpy arrays and scalars, torch
tensors (not bfloat16). ``load_state(path)`` returns an equal object: same types, dtypes, shapes
and bits (JSON floats are written with Python's shortest round-trip repr).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

_FORMAT = "modelxray.learning_dynamics.state/1"


def _paths(path: str | Path) -> tuple[Path, Path]:
    p = Path(path)
    base = p.with_suffix("") if p.suffix in (".json", ".npz") else p
    return base.with_name(base.name + ".json"), base.with_name(base.name + ".npz")


def save_state(path: str | Path, obj: Any) -> tuple[Path, Path]:
    """Write ``obj`` to ``path.json`` and ``path.npz``; returns both paths."""
    arrays: dict[str, np.ndarray] = {}

    def enc(v: Any) -> Any:
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, int):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else {"__float__": repr(v)}
        if isinstance(v, torch.Tensor):
            if v.dtype == torch.bfloat16:
                raise TypeError("bfloat16 tensors cannot be stored in npz; convert them first")
            key = f"a{len(arrays)}"
            arrays[key] = v.detach().cpu().numpy()
            return {"__tensor__": key}
        if isinstance(v, np.generic):
            key = f"a{len(arrays)}"
            arrays[key] = np.asarray(v)
            return {"__npscalar__": key}
        if isinstance(v, np.ndarray):
            if v.dtype.hasobject:
                raise TypeError("object arrays are not supported (they would need pickle)")
            key = f"a{len(arrays)}"
            arrays[key] = v
            return {"__ndarray__": key}
        if isinstance(v, tuple):
            return {"__tuple__": [enc(x) for x in v]}
        if isinstance(v, list):
            return [enc(x) for x in v]
        if isinstance(v, dict):
            bad = [k for k in v if not isinstance(k, str)]
            if bad:
                raise TypeError(f"dict keys must be strings, got {bad[0]!r}")
            if any(k.startswith("__") and k.endswith("__") for k in v):
                return {"__dict__": {k: enc(x) for k, x in v.items()}}
            return {k: enc(x) for k, x in v.items()}
        raise TypeError(f"cannot store a {type(v).__name__} in learning state (JSON + npz only)")

    json_path, npz_path = _paths(path)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": _FORMAT, "state": enc(obj)}
    json_path.write_text(json.dumps(doc, indent=1, allow_nan=False))
    with open(npz_path, "wb") as f:
        np.savez(f, **arrays)
    return json_path, npz_path


def load_state(path: str | Path) -> Any:
    """Read what :func:`save_state` wrote."""
    json_path, npz_path = _paths(path)
    doc = json.loads(json_path.read_text())
    if doc.get("format") != _FORMAT:
        raise ValueError(f"{json_path} is not a modelxray learning state (format {doc.get('format')!r})")
    with np.load(npz_path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}

    def dec(v: Any) -> Any:
        if isinstance(v, list):
            return [dec(x) for x in v]
        if isinstance(v, dict):
            if len(v) == 1:
                ((k, x),) = v.items()
                if k == "__float__":
                    return float(x)
                if k == "__tensor__":
                    return torch.from_numpy(arrays[x].copy())
                if k == "__ndarray__":
                    return arrays[x]
                if k == "__npscalar__":
                    return arrays[x][()]
                if k == "__tuple__":
                    return tuple(dec(y) for y in x)
                if k == "__dict__":
                    return {kk: dec(y) for kk, y in x.items()}
            return {k: dec(x) for k, x in v.items()}
        return v

    return dec(doc["state"])
