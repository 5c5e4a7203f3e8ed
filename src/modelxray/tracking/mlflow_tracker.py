"""MLflow tracking: one MLflow run per Hydra job, logged in batches through ``MlflowClient``.

The client API (not the fluent ``mlflow.start_run``) keeps no global state, so several runs in one
process (a Hydra multirun, the Python API, tests) never leak into each other.

Parallel jobs on one SQLite file race when the schema is created or migrated and when the
experiment is created ("duplicate column name", "database is locked"): ``prepare()`` does both once,
before a sweep's jobs start (``modelxray.sweep.SweepSetup``), and SQLite URIs get a busy timeout
(``sqlite_timeout_s``) so concurrent writers wait instead of failing.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from modelxray.core.configurable import Configurable
from modelxray.core.errors import ConfigError
from modelxray.tracking.redact import redact

_PARAM_BATCH = 100  # MLflow's limit of params per log_batch call
_METRIC_BATCH = 1000  # and of metrics
_PARAM_MAX_CHARS = 6000


@dataclass
class MlflowTracker(Configurable):
    uri: str = "sqlite:///mlflow.db"
    experiment: str = "modelxray"
    run_name: str | None = None
    artifact_location: str | None = None
    tags: dict = field(default_factory=dict)
    sqlite_timeout_s: float = 60.0  # SQLite busy timeout: parallel jobs wait for the write lock this long

    def validate(self) -> None:
        if not self.uri:
            raise ConfigError("uri", "is empty: use sqlite:///mlflow.db, a directory, or http://host:port")
        if not self.experiment:
            raise ConfigError("experiment", "is empty: name the MLflow experiment")
        if self.uri.startswith("sqlite:///"):
            folder = Path(self.uri[len("sqlite:///") :].split("?")[0]).expanduser().resolve().parent
            if not folder.is_dir():
                raise ConfigError("uri", f"folder {str(folder)!r} of the SQLite file does not exist")

    @property
    def store_uri(self) -> str:
        """The URI handed to MLflow: SQLite gets ``?timeout=`` unless the user set a query already."""
        if self.uri.startswith("sqlite:") and "?" not in self.uri and self.sqlite_timeout_s:
            return f"{self.uri}?timeout={self.sqlite_timeout_s:g}"
        return self.uri

    def prepare(self) -> str:
        """Create (or migrate) the store and the experiment once; returns the experiment id. Called on
        the submitting host before a sweep's jobs start, so parallel jobs only ever read them."""
        from mlflow.tracking import MlflowClient

        return _get_or_create_experiment(
            MlflowClient(tracking_uri=self.store_uri), self.experiment, self.artifact_location
        )

    def find_finished(self, config_hash: str) -> tuple[str, dict[str, float]] | None:
        """The newest FINISHED run of this experiment with this config fingerprint: (run id, metrics)."""
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=self.store_uri)
        exp = client.get_experiment_by_name(self.experiment)
        if exp is None:
            return None
        runs = client.search_runs(
            [exp.experiment_id],
            max_results=1,
            order_by=["attributes.start_time DESC"],
            filter_string=f"tags.`modelxray.config_hash` = '{config_hash}' and attributes.status = 'FINISHED'",
        )
        return (runs[0].info.run_id, dict(runs[0].data.metrics)) if runs else None

    def start(self, run_name: str | None, tags: dict[str, str]) -> MlflowRun:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=self.store_uri)
        experiment_id = _get_or_create_experiment(client, self.experiment, self.artifact_location)
        run = client.create_run(
            experiment_id,
            run_name=self.run_name or run_name,
            tags={**{k: str(v) for k, v in tags.items()}, **{k: str(v) for k, v in self.tags.items()}},
        )
        return MlflowRun(client, run.info.run_id, self.uri, self.experiment)


def _get_or_create_experiment(client, name: str, artifact_location: str | None) -> str:
    from mlflow.exceptions import MlflowException

    exp = client.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            client.restore_experiment(exp.experiment_id)
        return exp.experiment_id
    try:
        return client.create_experiment(name, artifact_location=artifact_location)
    except MlflowException:  # created meanwhile by a parallel job
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


RUN_FILE = "mlflow_run.json"  # in the job's output dir: which run this job logs to


def end_orphan_run(job_dir: Path, status: str = "KILLED") -> bool:
    """End the run of a job that died before it could (SIGKILL, out of memory): ``status`` if it is
    still RUNNING. Returns whether it changed anything."""
    import json

    from mlflow.tracking import MlflowClient

    path = Path(job_dir) / RUN_FILE
    if not path.exists():
        return False
    info = json.loads(path.read_text())
    client = MlflowClient(tracking_uri=info["uri"])
    if client.get_run(info["run_id"]).info.status != "RUNNING":
        return False
    client.set_terminated(info["run_id"], status=status)
    return True


class MlflowRun:
    def __init__(self, client, run_id: str, uri: str, experiment: str):
        self.client, self.run_id, self.uri, self.experiment = client, run_id, uri, experiment

    def log_params(self, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:_PARAM_MAX_CHARS]) for k, v in redact(params).items()]
        for i in range(0, len(items), _PARAM_BATCH):
            self.client.log_batch(self.run_id, params=items[i : i + _PARAM_BATCH])

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step or 0) for k, v in metrics.items() if math.isfinite(float(v))]
        for i in range(0, len(items), _METRIC_BATCH):
            self.client.log_batch(self.run_id, metrics=items[i : i + _METRIC_BATCH])

    def log_metric_rows(self, rows: list[tuple[int, dict[str, float]]]) -> None:
        """Step-indexed metrics, many steps per call (a training run's history): batches of 1,000."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [
            Metric(k, float(v), now, int(step))
            for step, metrics in rows
            for k, v in metrics.items()
            if math.isfinite(float(v))
        ]
        for i in range(0, len(items), _METRIC_BATCH):
            self.client.log_batch(self.run_id, metrics=items[i : i + _METRIC_BATCH])

    def set_tags(self, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_artifacts(self, folder: Path, exclude: tuple[str, ...] = ()) -> None:
        """Every file and folder of the run's output dir but ``exclude`` (e.g. large checkpoints)."""
        for entry in sorted(os.listdir(folder)):
            if entry == RUN_FILE or entry in exclude:  # RUN_FILE: local bookkeeping, holds the tracking URI
                continue
            path = Path(folder) / entry
            if path.is_dir():
                self.client.log_artifacts(self.run_id, str(path), artifact_path=entry)
            else:
                self.client.log_artifact(self.run_id, str(path))

    def log_text(self, text: str, artifact_path: str) -> None:
        self.client.log_text(self.run_id, text, artifact_path)

    def finish(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status=status)

    def record(self, folder: Path) -> None:
        """Leave the run's id in the job's folder, so a launcher can end it if the job is killed."""
        import json

        (Path(folder) / RUN_FILE).write_text(json.dumps({"uri": self.uri, "run_id": self.run_id}))

    def describe(self) -> str:
        return f"MLflow run {self.run_id} in experiment {self.experiment!r} at {redact({'uri': self.uri})['uri']}"


def log_to_active_run(metrics: dict[str, float], step: int) -> bool:
    """Log finite ``metrics`` at ``step`` to the fluent API's active MLflow run (a user's own
    ``mlflow.start_run()`` around a Trainer); False when there is none."""
    import mlflow
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    run = mlflow.active_run()
    if run is None:
        return False
    now = int(time.time() * 1000)
    items = [Metric(k, float(v), now, step) for k, v in metrics.items() if math.isfinite(float(v))]
    client = MlflowClient()
    for i in range(0, len(items), 1000):
        client.log_batch(run.info.run_id, metrics=items[i : i + 1000])
    return True
