"""The tracker interface the app talks to, and ``tracker=none``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from modelxray.core.configurable import Configurable
from modelxray.core.errors import ConfigError


class TrackerRun(Protocol):
    run_id: str | None

    def log_params(self, params: dict[str, str]) -> None: ...
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...
    def log_metric_rows(self, rows: list[tuple[int, dict[str, float]]]) -> None: ...
    def set_tags(self, tags: dict[str, str]) -> None: ...
    def mark_finished(self, analyzers: list[str]) -> None: ...
    def log_artifacts(self, folder: Path, exclude: tuple[str, ...] = ()) -> None: ...
    def log_files(self, folder: Path, paths: list[Path]) -> None: ...
    def fetch_results(self, folder: Path, names: list[str]) -> dict[str, Path]: ...
    def log_text(self, text: str, artifact_path: str) -> None: ...
    def log_dataset(self, identity, context: str = "evaluation") -> None: ...
    def finish(self, status: str) -> None: ...
    def reopen(self) -> None: ...
    def record(self, folder: Path) -> None: ...
    def describe(self) -> str: ...

    def run_link(self, run_id: str | None = None) -> str | None: ...

    def set_description(self, text: str) -> None: ...
    def view_hint(self) -> str: ...


class NullRun:
    run_id = None

    def log_params(self, params):
        pass

    def log_metrics(self, metrics, step=None):
        pass

    def log_metric_rows(self, rows):
        pass

    def set_tags(self, tags):
        pass

    def mark_finished(self, analyzers):
        pass

    def log_artifacts(self, folder, exclude=()):
        pass

    def log_files(self, folder, paths):
        pass

    def fetch_results(self, folder, names):
        return {}

    def log_text(self, text, artifact_path):
        pass

    def log_dataset(self, identity, context="evaluation"):
        pass

    def finish(self, status):
        pass

    def reopen(self):
        pass

    def record(self, folder):
        pass

    def describe(self) -> str:
        return "disabled (tracker=none)"

    def run_link(self, run_id=None):
        return None

    def set_description(self, text):
        pass

    def view_hint(self) -> str:
        return ""


@dataclass
class NullTracker(Configurable):
    def check(self) -> None:
        pass  # no store to reach

    def start(self, run_name: str | None, tags: dict[str, str]) -> NullRun:
        return NullRun()

    def store_key(self) -> None:
        return None  # no store: a sweep's jobs have no parent run to log under

    def find_finished(self, config_hash: str) -> None:
        return None  # nothing is recorded, so nothing can be skipped

    def find_resumable(self, config_hash: str) -> None:
        return None

    def resumable(self, run_id: str, config_hash: str) -> list[str]:
        raise ConfigError("runtime.resume", "tracker=none records no runs to resume; use tracker=mlflow")
