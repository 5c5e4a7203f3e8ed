"""What a job is and what it gives back: what Hydra knows about it, its outcome, the exception
SIGTERM becomes, and its config as MLflow params and as a fingerprint. The CLI, the Python API and
ModelAnalyzer share these with the run itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelxray.core.result import Result


@dataclass
class JobInfo:
    """What Hydra knows about this job (or what the Python API makes up in its place)."""

    output_dir: Path
    choices: dict[str, str] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    sweep_dir: str | None = None
    job_num: int | None = None


def choices_of(hydra_cfg) -> dict[str, str]:
    """Config group choices of the run (``quant=int4``...), without Hydra's own groups (``hydra/...``,
    and groups packaged under ``hydra``, e.g. ``local@hydra.launcher``)."""
    return {
        k: str(v)
        for k, v in hydra_cfg.runtime.choices.items()
        if not k.startswith("hydra") and "@hydra" not in k and v is not None
    }


@dataclass
class RunOutcome:
    metrics: dict[str, float]
    results: dict[str, Result]
    output_dir: Path
    run_id: str | None
    tracking: str
    skipped: bool = False  # runtime.skip_finished found this config FINISHED already
    view: str = ""  # how to open the runs in MLflow's UI

    @property
    def failed(self) -> list[str]:
        return [n for n, r in self.results.items() if not r.ok]


def flatten(node: Any, prefix: str = "") -> dict[str, str]:
    """Config as dotted keys -> strings (lists kept as one value), for MLflow params."""
    out: dict[str, str] = {}
    if isinstance(node, dict):
        for k, v in node.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict) and v:
                out.update(flatten(v, key))
            else:
                out[key] = "null" if v is None else str(v)
    return out


_NOT_IN_FINGERPRINT = ("tracker", "runtime", "progress", "model_cache_size")


def config_fingerprint(config: dict) -> str:
    """Identity of what a run computes: the resolved config without where it is logged or how it
    is shown. Two runs with the same fingerprint compute the same thing (``runtime.skip_finished``)."""
    import hashlib
    import json

    kept = {k: v for k, v in config.items() if k not in _NOT_IN_FINGERPRINT}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]
