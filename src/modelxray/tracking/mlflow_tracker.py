"""MLflow tracking: one MLflow run per Hydra job, logged in batches through ``MlflowClient``.

The client API (not the fluent ``mlflow.start_run``) keeps no global state, so several runs in one
process (a Hydra multirun, the Python API, tests) never leak into each other.

Parallel jobs on one SQLite file race when the schema is created or migrated and when the
experiment is created ("duplicate column name", "database is locked"): ``prepare()`` does both once,
before a sweep's jobs start (``modelxray.sweep.SweepSetup``), and SQLite URIs get a busy timeout
(``sqlite_timeout_s``) so concurrent writers wait instead of failing.

Artifacts go next to the store, not into the working directory: a new experiment on a SQLite store
gets ``<folder of the .db file>/mlruns/<experiment>`` as its artifact location (absolute, so every
job of a sweep writes there whatever its working directory); ``artifact_location`` overrides it, and
a tracking server keeps its own default. An experiment that exists keeps the location it has.

One run's logging (batches, redaction, a server that stops answering) is ``mlflow_run.MlflowRun``.

``check()`` tries the store once before any model loads (a writable folder for SQLite, a quick
``GET /health`` for a server), so a store that cannot work fails in one line within seconds instead
of after minutes of retries.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlparse

from modelxray.core.configurable import Configurable
from modelxray.core.errors import ConfigError
from modelxray.core.lazy import collector_paused
from modelxray.tracking.mlflow_run import DONE_TAG, PID_TAG, MlflowRun
from modelxray.tracking.mlflow_store import (
    check_server,
    check_writable,
    copy_new,
    existing_parent,
    folder_name,
    get_or_create_experiment,
    store_template,
)
from modelxray.tracking.redact import Redactor, secret_values

ARTIFACTS_DIR = "mlruns"  # next to a SQLite file: <folder>/mlruns/<experiment>/<run id>/artifacts
_CHECKED: set[tuple[str, str | None]] = set()  # (store, artifact location) pairs check() passed in this process


# the stores MLflow itself keeps runs in ("" and file: a local folder); plugins add theirs (plugin_schemes)
STORE_SCHEMES = ("", "file", "sqlite", "http", "https", "databricks", "postgresql", "mysql", "mssql")


def uri_scheme(uri: str) -> str:
    """``sqlite`` for ``sqlite:///x.db``, ``postgresql`` for ``postgresql+psycopg2://...``, "" for a
    path (a Windows drive letter included)."""
    scheme = urlparse(uri).scheme.lower()
    return "" if len(scheme) == 1 else scheme.split("+")[0]


def plugin_schemes() -> set[str]:
    """Schemes that installed MLflow plugins register for their tracking stores."""
    from importlib.metadata import entry_points

    return {ep.name for ep in entry_points(group="mlflow.tracking_store")}


@dataclass
class MlflowTracker(Configurable):
    uri: str = "sqlite:///mlflow.db"
    experiment: str = "modelxray"
    run_name: str | None = None
    artifact_location: str | None = None  # null = next to the store (SQLite: <its folder>/mlruns/<experiment>)
    tags: dict = field(default_factory=dict)
    sqlite_timeout_s: float = 60.0  # SQLite busy timeout: parallel jobs wait for the write lock this long (0: none)
    system_metrics: bool = False  # log CPU, memory, disk, network and GPU use over time (MLflow's system metrics)
    system_metrics_interval_s: float = 10.0  # seconds between two samples of the system metrics
    store_template_dir: str | None = "~/.cache/modelxray/mlflow"  # new SQLite stores copy an empty one from here
    request_timeout_s: float = 10.0  # a tracking server: seconds one request may take
    request_retries: int = 1  # a tracking server: retries of a failed request (then the run goes on locally)
    # the run's secrets (set from its config when the components are built): masked in all it logs
    redactor: ClassVar[Redactor] = Redactor()

    def validate(self) -> None:
        if not self.uri:
            raise ConfigError("uri", "is empty: use sqlite:///mlflow.db, a directory, or http://host:port")
        if not self.experiment:
            raise ConfigError("experiment", "is empty: name the MLflow experiment")
        self.require_positive("system_metrics_interval_s", "request_timeout_s")
        self.require_non_negative("request_retries", "sqlite_timeout_s")
        scheme = uri_scheme(self.uri)
        if scheme not in STORE_SCHEMES and scheme not in plugin_schemes():
            raise ConfigError(
                "uri",
                f"MLflow keeps no runs at a {scheme}:// address; use sqlite:///mlflow.db, a directory, http(s)://host:port "
                "or a database URI (postgresql://, mysql://, mssql://)",
            )
        db = self.sqlite_path()
        if db is not None and not db.parent.is_dir():
            raise ConfigError("uri", f"folder {str(db.parent)!r} of the SQLite file does not exist")

    def sqlite_path(self) -> Path | None:
        """The SQLite file of ``uri`` as an absolute path (relative to the working directory), or None."""
        if not self.uri.startswith("sqlite:///"):
            return None
        return Path(self.uri[len("sqlite:///") :].split("?")[0]).expanduser().resolve()

    def resolved_artifact_location(self) -> str | None:
        """Where a new experiment keeps its artifacts: ``artifact_location``, else next to a SQLite
        store, else None (a server or another store decides)."""
        if self.artifact_location:
            return os.path.expanduser(self.artifact_location)
        db = self.sqlite_path()
        if db is None:
            return None
        return str(db.parent / ARTIFACTS_DIR / folder_name(self.experiment))

    def check(self) -> None:
        """Fail in one line, within seconds, if the store cannot be used: a SQLite folder that is not
        writable, a server that does not answer. Once per store and process."""
        location, db = self.resolved_artifact_location(), self.sqlite_path()
        store = str(db) if db is not None else self.uri
        if (store, location) in _CHECKED:
            return
        if db is not None:
            check_writable(db.parent, "tracker.uri", f"folder of the SQLite file {str(db)!r}")
            self.seed_store()
        elif self.uri.startswith(("http://", "https://")):
            self.bound_requests()
            check_server(self.uri)
        if location and "://" not in location:
            check_writable(
                existing_parent(Path(location)), "tracker.artifact_location", f"artifact folder {location!r}"
            )
        _CHECKED.add((store, location))

    def bound_requests(self) -> None:
        """MLflow's HTTP client retries a dead server 7 times with growing waits, 120 s each (about
        13 minutes a call): bounded here to ``request_timeout_s`` and ``request_retries``."""
        os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(max(1, round(self.request_timeout_s)))
        os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = str(self.request_retries)
        os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"] = "1"
        os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_JITTER"] = "0"

    def seed_store(self) -> None:
        """A SQLite store that does not exist yet starts as a copy of an empty store made once per MLflow
        version (``store_template_dir``): MLflow builds a new file by running its schema migrations one
        by one, about 2 s on a 2-core machine; the copy takes milliseconds."""
        db = self.sqlite_path()
        if db is None or db.exists() or not self.store_template_dir:
            return
        try:
            template = store_template(Path(os.path.expanduser(self.store_template_dir)))
            copy_new(template, db)
        except OSError:  # no writable cache: MLflow creates the store itself, as it would anyway
            return

    @property
    def store_uri(self) -> str:
        """The URI handed to MLflow: SQLite gets ``?timeout=`` unless the user set a query already."""
        if self.uri.startswith("sqlite:") and "?" not in self.uri and self.sqlite_timeout_s:
            return f"{self.uri}?timeout={self.sqlite_timeout_s:g}"
        return self.uri

    def prepare(self) -> str | None:
        """Create (or migrate) the store and the experiment once; returns the experiment id. Called on
        the submitting host before a sweep's jobs start, so parallel jobs only ever read them. None
        when the store cannot be used: each job then says why in one line (``check()``)."""
        from mlflow.tracking import MlflowClient

        try:
            self.check()
        except ConfigError:
            return None
        return get_or_create_experiment(
            MlflowClient(tracking_uri=self.store_uri), self.experiment, self.resolved_artifact_location()
        )

    def _runs_of(self, config_hash: str, status_filter: str, most: int) -> list:
        """This experiment's runs with this config fingerprint matching ``status_filter``, newest first."""
        from mlflow.tracking import MlflowClient

        self.check()
        client = MlflowClient(tracking_uri=self.store_uri)
        exp = client.get_experiment_by_name(self.experiment)
        if exp is None:
            return []
        return client.search_runs(
            [exp.experiment_id],
            max_results=most,
            order_by=["attributes.start_time DESC"],
            filter_string=f"tags.`modelxray.config_hash` = '{config_hash}' and {status_filter}",
        )

    def find_finished(self, config_hash: str) -> tuple[str, dict[str, float]] | None:
        """The newest FINISHED run of this experiment with this config fingerprint: (run id, metrics)."""
        runs = self._runs_of(config_hash, "attributes.status = 'FINISHED'", 1)
        return (runs[0].info.run_id, dict(runs[0].data.metrics)) if runs else None

    def find_resumable(self, config_hash: str) -> tuple[str, list[str]] | None:
        """The newest run of this config that stopped before it finished (FAILED, KILLED, or
        RUNNING with its process gone from this host) and kept some analyzers' results: (run id,
        the analyzers it finished)."""
        for run in self._runs_of(config_hash, "attributes.status != 'FINISHED'", 20):
            done = _done(run)
            if done and (run.info.status != "RUNNING" or _process_gone(run.data.tags)):
                return run.info.run_id, done
        return None

    def resumable(self, run_id: str, config_hash: str) -> list[str]:
        """The analyzers run ``run_id`` finished, after checking it can be resumed by this config
        (``runtime.resume``): it exists here, it computed the same thing, it is not running."""
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        self.check()
        client = MlflowClient(tracking_uri=self.store_uri)
        try:
            run = client.get_run(run_id)
        except MlflowException:
            raise ConfigError("runtime.resume", f"no run {run_id!r} in the store {self.uri}") from None
        tags = run.data.tags
        if tags.get("modelxray.config_hash") != config_hash:
            raise ConfigError(
                "runtime.resume",
                f"run {run_id} was made with another configuration (fingerprint "
                f"{tags.get('modelxray.config_hash', 'none')}, this one {config_hash}); "
                "give the overrides it ran with",
            )
        if run.info.status == "RUNNING" and not _process_gone(tags):
            raise ConfigError("runtime.resume", f"run {run_id} is still running (process {tags.get(PID_TAG)})")
        return _done(run)

    def run_exists(self, run_id: str) -> bool:
        """Whether the store holds run ``run_id``."""
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        try:
            MlflowClient(tracking_uri=self.store_uri).get_run(run_id)
            return True
        except MlflowException:
            return False

    def store_key(self) -> str:
        """Which store and experiment this tracker logs to, as one string (a SQLite file by its
        absolute path). A sweep's jobs log under its parent run only when their key is the parent's."""
        db = self.sqlite_path()
        return f"{db if db is not None else self.uri}#{self.experiment}"

    def resume(self, run_id: str, tags: dict[str, str]) -> MlflowRun:
        """Reopen ``run_id`` (status RUNNING again) to log the analyzers it has not finished."""
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=self.store_uri)
        client.update_run(run_id, status="RUNNING")
        run = MlflowRun(client, run_id, self.uri, self.experiment, self.run_redactor())
        run.set_tags({**tags, PID_TAG: str(os.getpid())})
        return self._watched(run)

    def start(self, run_name: str | None, tags: dict[str, str]) -> MlflowRun:
        with collector_paused():  # MLflow, SQLAlchemy and the store's schema check: seconds of imports
            from mlflow.tracking import MlflowClient

            self.check()
            client = MlflowClient(tracking_uri=self.store_uri)
            experiment_id = get_or_create_experiment(client, self.experiment, self.resolved_artifact_location())
        name = self.run_name or run_name
        redactor = self.run_redactor()
        run = client.create_run(
            experiment_id,
            run_name=redactor.text(name) if name else name,
            tags=redactor.pairs({**tags, **self.tags, PID_TAG: str(os.getpid())}),
        )
        return self._watched(MlflowRun(client, run.info.run_id, self.uri, self.experiment, redactor))

    def run_redactor(self) -> Redactor:
        """The run config's secrets (``redactor``) and this tracker's own (its tags', its URI's): a
        tracker built without the run's config (a sweep's parent run) still knows those."""
        own = secret_values({"tags": dict(self.tags), "uri": self.uri})
        return Redactor([*self.redactor.secrets, *own])

    def _watched(self, run: MlflowRun) -> MlflowRun:
        """With ``system_metrics``, MLflow's monitor samples the machine in a thread until the run ends."""
        if self.system_metrics:
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

            run.monitor = SystemMetricsMonitor(
                run.run_id, sampling_interval=self.system_metrics_interval_s, tracking_uri=self.store_uri
            )
            run.monitor.start()
        return run


def _done(run) -> list[str]:
    return [n for n in run.data.tags.get(DONE_TAG, "").split(",") if n]


def _process_gone(tags: dict[str, str]) -> bool:
    """A RUNNING run whose process is known to be dead: it ran on this host and its pid is gone.
    A run from another host cannot be checked, so it counts as alive (resume it by id instead)."""
    import socket

    pid = tags.get(PID_TAG)
    if not pid or tags.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError):
        return False
    return False


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
