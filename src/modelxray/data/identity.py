"""What a run was measured on, as MLflow records a dataset: a name, where it comes from, a digest of
the exact tokens or images scored, and its size. Two runs on different text get different digests
even when their datasets share a name (another ``max_tokens``, another file)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DatasetIdentity:
    name: str
    digest: str  # sha256 of the scored tensors, first 16 hex digits
    source_type: str  # MLflow's dataset source kinds: local, hugging_face, code
    source: str
    size: dict[str, int] = field(default_factory=dict)  # {"tokens": 8192} or {"examples": 360}
    schema: dict[str, str] = field(default_factory=dict)  # column -> dtype and shape


def identify(data: Any, dataset_cfg: Any = None) -> DatasetIdentity | None:
    """The identity of a subject's evaluation data (TokenData, ClassificationData, ExampleInputs), or
    None when the run has none (weights only)."""
    from modelxray.data.base import ClassificationData, TokenData
    from modelxray.data.example_inputs import ExampleInputs, tensors_only

    source_type, source = source_of(dataset_cfg, data)
    if isinstance(data, TokenData):
        return DatasetIdentity(
            data.name,
            digest_of(data.ids),
            source_type,
            source,
            {"tokens": data.n_tokens, "bytes": int(data.n_bytes), "seq_len": int(data.seq_len)},
            {"input_ids": f"int64 [{data.n_tokens}]"},
        )
    if isinstance(data, ClassificationData):
        return DatasetIdentity(
            data.name,
            digest_of(data.x_test, data.y_test),
            source_type,
            source,
            {"examples": data.n_samples, "classes": int(data.n_classes)},
            {
                "x": f"{_dtype(data.x_test)} {list(data.x_test.shape)}",
                "y": f"{_dtype(data.y_test)} {list(data.y_test.shape)}",
            },
        )
    if isinstance(data, ExampleInputs):
        tensors = tensors_only(data.tensors)
        fixed = {n: v for n, v in data.tensors.items() if n not in tensors}
        names = sorted(tensors)
        digest = digest_of(*(tensors[n] for n in names))
        if fixed:  # fixed arguments change the outputs too
            digest = hashlib.sha256(f"{digest} {sorted((n, repr(v)) for n, v in fixed.items())}".encode()).hexdigest()[
                :16
            ]
        return DatasetIdentity(
            data.name,
            digest,
            "local" if data.source.startswith("/") else "code",
            data.source,
            {"examples": data.n_examples},
            {
                **{n: f"{_dtype(tensors[n])} {list(tensors[n].shape)}" for n in names},
                **{n: repr(v) for n, v in sorted(fixed.items())},
            },
        )
    return None


def digest_of(*tensors: Any) -> str:
    """sha256 over the tensors' shapes, dtypes and bytes (contiguous CPU copies)."""
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().cpu().contiguous()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.view(-1).view(_bytes_dtype()).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def source_of(dataset_cfg: Any, data: Any = None) -> tuple[str, str]:
    """(source type, source) of a dataset config: its files, its hub dataset, or the code that makes it."""
    if dataset_cfg is None:
        return "code", "in-memory data (Python API)"
    paths = getattr(dataset_cfg, "paths", None)
    if paths:
        return "local", ", ".join(str(p) for p in paths)
    root = getattr(dataset_cfg, "root", None)
    if root:
        return "local", str(root)
    source = getattr(dataset_cfg, "source", None)  # a dataset that says where it reads (dataset=hf)
    if callable(source):
        return source()
    cls = type(dataset_cfg)
    return "code", f"{cls.__module__}.{cls.__qualname__}"


def _dtype(t: Any) -> str:
    return str(t.dtype).replace("torch.", "")


def _bytes_dtype():
    import torch

    return torch.uint8
