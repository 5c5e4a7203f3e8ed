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

``check()`` tries the store once before any model loads (a writable folder for SQLite, a quick
``GET /health`` for a server), so a store that cannot work fails in one line within seconds instead
of after minutes of retries.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from modelxray.core.configurable import Configurable
from modelxray.core.errors import ConfigError
from modelxray.tracking.mlflow_store import (
    check_server,
    check_writable,
    copy_new,
    existing_parent,
    folder_name,
    get_or_create_experiment,
    store_template,
)
from modelxray.tracking.redact import Redactor, redact

TEXT_SUFFIXES = (".yaml", ".yml", ".json", ".md", ".txt", ".csv", ".log", ".html", ".tsv")  # redacted before upload

_PARAM_BATCH = 100  # MLflow's limit of params per log_batch call
_METRIC_BATCH = 1000  # and of metrics
_PARAM_MAX_CHARS = 6000
DATASET_ATTEMPTS = 4  # a dataset row that parallel jobs create at once: linked again after the losing insert
ARTIFACTS_DIR = "mlruns"  # next to a SQLite file: <folder>/mlruns/<experiment>/<run id>/artifacts
_CHECKED: set[tuple[str, str | None]] = set()  # (store, artifact location) pairs check() passed in this process


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

    def resume(self, run_id: str, tags: dict[str, str]) -> MlflowRun:
        """Reopen ``run_id`` (status RUNNING again) to log the analyzers it has not finished."""
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=self.store_uri)
        client.update_run(run_id, status="RUNNING")
        run = MlflowRun(client, run_id, self.uri, self.experiment, self.redactor)
        run.set_tags(tags)
        return self._watched(run)

    def start(self, run_name: str | None, tags: dict[str, str]) -> MlflowRun:
        from mlflow.tracking import MlflowClient

        self.check()
        client = MlflowClient(tracking_uri=self.store_uri)
        experiment_id = get_or_create_experiment(client, self.experiment, self.resolved_artifact_location())
        name = self.run_name or run_name
        run = client.create_run(
            experiment_id,
            run_name=self.redactor.text(name) if name else name,
            tags=self.redactor.pairs({**tags, **self.tags}),
        )
        return self._watched(MlflowRun(client, run.info.run_id, self.uri, self.experiment, self.redactor))

    def _watched(self, run: MlflowRun) -> MlflowRun:
        """With ``system_metrics``, MLflow's monitor samples the machine in a thread until the run ends."""
        if self.system_metrics:
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

            run.monitor = SystemMetricsMonitor(
                run.run_id, sampling_interval=self.system_metrics_interval_s, tracking_uri=self.store_uri
            )
            run.monitor.start()
        return run


def store_key(tracker) -> str | None:
    """Which store and experiment a tracker logs to, as one string (a SQLite file by its absolute
    path); None for ``tracker=none``. A sweep's jobs log under its parent run only when their key
    is the parent's."""
    if not isinstance(tracker, MlflowTracker):
        return None
    db = tracker.sqlite_path()
    return f"{db if db is not None else tracker.uri}#{tracker.experiment}"


PID_TAG = "modelxray.pid"  # the process logging the run, with the ``host`` tag: is a RUNNING run alive?
DONE_TAG = "modelxray.analyzers_done"  # analyzers whose results the run holds, comma-separated


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


RUN_FILE = "mlflow_run.json"  # in the job's output dir: which run this job logs to (local bookkeeping)


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


# MLflow 3.17's UI keeps its "GenAI / Model training" switch per browser and reads this URL parameter
# before it: links with it open on the runs table and charts (earlier MLflow 3 UIs read the tag above)
UI_VIEW = "workflowType=machine_learning"
UI_DEFAULT = "http://127.0.0.1:5000"  # where ``mlflow ui`` serves by default


def ui_url(base: str, experiment_id: str, run_id: str | None = None) -> str:
    """A link into MLflow's UI at ``base``: the experiment's runs, or one run."""
    page = f"experiments/{experiment_id}/runs" + (f"/{run_id}" if run_id else "")
    return f"{base.rstrip('/')}/#/{page}?{UI_VIEW}"


UNSYNCED_FILE = "tracking_unsynced.json"  # in the run folder: the server stopped answering during the run


def _unreachable(exc: BaseException) -> bool:
    """A tracking server that does not answer (refused, timed out, gone), as MLflow reports it."""
    import requests
    from mlflow.exceptions import MlflowException

    if isinstance(exc, (requests.exceptions.RequestException, ConnectionError, TimeoutError)):
        return True
    text = str(exc)
    return isinstance(exc, MlflowException) and any(
        s in text for s in ("Max retries exceeded", "API request to", "Connection refused", "timed out")
    )


def _to_store(method):
    """A call that sends to the store. On a server that stopped answering, the run goes on locally:
    the first such failure is said once, this and every later call are skipped, and the run folder
    records that it is not synced (``scripts/sync_run.py`` sends it later)."""
    import functools

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        if self.offline:
            return None
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            if not (self.remote and _unreachable(exc)):
                raise
            self._go_offline(method.__name__, exc)
            return None

    return call


class MlflowRun:
    def __init__(self, client, run_id: str, uri: str, experiment: str, redactor: Redactor | None = None):
        self.client, self.run_id, self.uri, self.experiment = client, run_id, uri, experiment
        self.redactor = redactor or Redactor()  # every param, tag, text and text file sent is redacted
        self.remote = uri.startswith(("http://", "https://"))
        self.offline = False  # the server stopped answering: the rest of the run stays local
        self.folder: Path | None = None  # the run folder (``record``)
        self._sent: dict[Path, tuple[int, int]] = {}  # file -> (mtime, size) when it was logged
        self.monitor = None  # MLflow's system-metrics monitor, with tracker.system_metrics

    @_to_store
    def log_params(self, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:_PARAM_MAX_CHARS]) for k, v in self.redactor.pairs(params).items()]
        for i in range(0, len(items), _PARAM_BATCH):
            self.client.log_batch(self.run_id, params=items[i : i + _PARAM_BATCH])

    @_to_store
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step or 0) for k, v in metrics.items() if math.isfinite(float(v))]
        for i in range(0, len(items), _METRIC_BATCH):
            self.client.log_batch(self.run_id, metrics=items[i : i + _METRIC_BATCH])

    @_to_store
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

    @_to_store
    def set_tags(self, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in self.redactor.pairs(tags).items()])

    @_to_store
    def log_files(self, folder: Path, paths: list[Path]) -> None:
        """Log ``paths`` (files inside ``folder``) under their relative folders, each once: a file
        logged before and unchanged since is not sent again."""
        folder = Path(folder)
        for path in paths:
            stamp = (path.stat().st_mtime_ns, path.stat().st_size)
            if self._sent.get(path) == stamp:
                continue
            rel = path.relative_to(folder).parent
            with self._redacted(path) as sent:
                self.client.log_artifact(self.run_id, str(sent), artifact_path=None if rel == Path(".") else str(rel))
            self._sent[path] = stamp

    @contextmanager
    def _redacted(self, path: Path):
        """``path``, or where it holds text with a secret, a redacted copy of the same name."""
        if path.suffix.lower() not in TEXT_SUFFIXES:
            yield path
            return
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            yield path
            return
        clean = self.redactor.text(text)
        if clean == text:
            yield path
            return
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / path.name
            copy.write_text(clean)
            yield copy

    def log_artifacts(self, folder: Path, exclude: tuple[str, ...] = ()) -> None:
        """Every file of the run's output dir but ``exclude`` (top-level names, e.g. large
        checkpoints), skipping those logged already and unchanged since."""
        folder = Path(folder)
        paths = []
        for entry in sorted(os.listdir(folder)):
            if entry in (RUN_FILE, UNSYNCED_FILE) or entry in exclude:  # local bookkeeping, holds the tracking URI
                continue
            path = folder / entry
            paths.extend(sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path])
        self.log_files(folder, paths)

    def fetch_results(self, folder: Path, names: list[str]) -> dict[str, Path]:
        """Download the saved results (``results/<name>.json``) of ``names`` into ``folder``."""
        out = {}
        for name in names:
            local = self.client.download_artifacts(self.run_id, f"results/{name}.json", str(folder))
            out[name] = Path(local)
        return out

    @_to_store
    def log_text(self, text: str, artifact_path: str) -> None:
        self.client.log_text(self.run_id, self.redactor.text(text), artifact_path)

    @_to_store
    def log_dataset(self, identity, context: str = "evaluation") -> None:
        """The run's data as an MLflow dataset input (``modelxray.data.identity.DatasetIdentity``): the
        UI's dataset column and filter show it, and runs on other text show another digest."""
        import json

        from mlflow.entities import Dataset, DatasetInput, InputTag

        dataset = Dataset(
            name=identity.name,
            digest=identity.digest,
            source_type=identity.source_type,
            source=json.dumps({"uri": identity.source}),
            schema=json.dumps({"mlflow_colspec": [{"name": k, "type": v} for k, v in identity.schema.items()]}),
            profile=json.dumps({"num_rows": next(iter(identity.size.values()), 0), **identity.size}),
        )
        tags = [InputTag(key="mlflow.data.context", value=context)]
        for attempt in range(DATASET_ATTEMPTS):
            try:
                self.client.log_inputs(self.run_id, datasets=[DatasetInput(dataset=dataset, tags=tags)])
                return
            except Exception as err:  # noqa: BLE001 - only the race below is retried
                # parallel jobs on the same text each create its dataset row if they see none: all but
                # one insert fails on the store's unique key; the row exists now, so linking it again works
                if "UNIQUE constraint" not in str(err) or attempt == DATASET_ATTEMPTS - 1:
                    raise
                time.sleep(0.1 * (attempt + 1))

    @_to_store
    def finish(self, status: str) -> None:
        if self.monitor is not None:  # its last samples are flushed before the run ends
            self.monitor.finish()
            self.monitor = None
        self.client.set_terminated(self.run_id, status=status)

    @_to_store
    def reopen(self) -> None:
        """RUNNING again after ``finish``: a ModelAnalyzer logs each call's analyzer to one run."""
        self.client.update_run(self.run_id, status="RUNNING")

    def record(self, folder: Path) -> None:
        """Leave the run's id in the job's folder, so a launcher can end it if the job is killed."""
        import json

        self.folder = Path(folder)
        info = {"uri": self.uri, "run_id": self.run_id, "experiment": self.experiment}
        (self.folder / RUN_FILE).write_text(json.dumps(info))

    def hurry(self) -> None:
        """The process is being stopped: the last calls to a server get 2 s each, no retry."""
        if self.remote:
            os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = "2"
            os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"

    def _go_offline(self, call: str, exc: BaseException) -> None:
        import json
        import sys

        self.offline = True
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        where = self.folder or Path(".")
        print(
            f"modelxray: the tracking server {redact({'uri': self.uri})['uri']} stopped answering ({call}: {first}); "
            f"the analysis goes on and is kept in {where}; send it later: python scripts/sync_run.py {where}",
            file=sys.stderr,
        )
        if self.folder is not None:
            info = {"uri": self.uri, "run_id": self.run_id, "experiment": self.experiment, "failed_call": call}
            (self.folder / UNSYNCED_FILE).write_text(json.dumps({**info, "error": first}))

    def describe(self) -> str:
        where = f"MLflow run {self.run_id} in experiment {self.experiment!r} at {redact({'uri': self.uri})['uri']}"
        if self.offline:
            where += (
                f" (NOT SYNCED: the server stopped answering; send it with python scripts/sync_run.py {self.folder})"
            )
        return where

    def view_hint(self) -> str:
        """How to see the experiment's runs in MLflow's UI: the link on a server, the command and the
        link for a store file."""
        if self.offline:
            return ""
        experiment_id = self.client.get_run(self.run_id).info.experiment_id
        if self.uri.startswith(("http://", "https://")):
            return ui_url(re.sub(r"//[^/@]*@", "//", self.uri), experiment_id)  # no credentials in a printed link
        return f"mlflow ui --backend-store-uri {self.uri}  then  {ui_url(UI_DEFAULT, experiment_id)}"


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
