"""One MLflow run's logging: params, metrics, tags, texts and files in batches through
``MlflowClient``, every one redacted (``redact.Redactor``); on a tracking server that stops
answering, the run goes on locally and its folder says it is not synced (``scripts/sync_run.py``
sends it later). Also the run's local bookkeeping file and links into MLflow's UI."""

from __future__ import annotations

import math
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from modelxray.tracking.redact import URI_CREDS, Redactor, redact_text

PID_TAG = "modelxray.pid"  # the process logging the run, with the ``host`` tag: is a RUNNING run alive?
DONE_TAG = "modelxray.analyzers_done"  # analyzers whose results the run holds, comma-separated
_PARAM_BATCH = 100  # MLflow's limit of params per log_batch call
_METRIC_BATCH = 1000  # and of metrics
_PARAM_MAX_CHARS = 6000
DATASET_ATTEMPTS = 4  # a dataset row that parallel jobs create at once: linked again after the losing insert


RUN_FILE = "mlflow_run.json"  # in the job's output dir: which run this job logs to (local bookkeeping)
# the URIs this process logs to, by their form without credentials (the one the run folder keeps)
_WITH_CREDENTIALS: dict[str, str] = {}


def without_credentials(uri: str) -> str:
    """``uri`` as the run folder keeps it: no ``user:password@`` (MLflow takes them from
    ``MLFLOW_TRACKING_USERNAME``/``_PASSWORD`` too, and ``sync_run.py --uri`` takes a full URI)."""
    return URI_CREDS.sub(lambda m: m.group("scheme"), uri)


@contextmanager
def no_run_link_printed():
    """MLflow prints "View run ... at <URL>" when a run on a server ends, credentials and all, to
    stdout (the console, a SLURM log): not printed (modelxray prints its own link, without them)."""
    var = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"
    before = os.environ.get(var)
    os.environ[var] = "true"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = before


def end_orphan_run(job_dir: Path, status: str = "KILLED") -> bool:
    """End the run of a job that died before it could (SIGKILL, out of memory): ``status`` if it is
    still RUNNING. Returns whether it changed anything."""
    import json

    from mlflow.tracking import MlflowClient

    path = Path(job_dir) / RUN_FILE
    if not path.exists():
        return False
    info = json.loads(path.read_text())
    client = MlflowClient(tracking_uri=_WITH_CREDENTIALS.get(info["uri"], info["uri"]))
    if client.get_run(info["run_id"]).info.status != "RUNNING":
        return False
    with no_run_link_printed():
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


def _text_of(path: Path) -> str | None:
    """The file's text, or None for a binary file (a NUL byte in its first 8 KiB, or not UTF-8)."""
    try:
        with open(path, "rb") as f:
            if b"\0" in f.read(8192):
                return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


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
        _WITH_CREDENTIALS[without_credentials(uri)] = uri  # a launcher ending a killed job's run reaches it

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

    def mark_finished(self, analyzers: list[str]) -> None:
        """Record which analyzers' results the run holds: a resumed run does not run them again."""
        self.set_tags({DONE_TAG: ",".join(analyzers)})

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
        """``path``, or where it holds text with a secret, a redacted copy of the same name. Text is
        known by its content, not its name: a run folder may hold any file (``job.out``, ``.ini``)."""
        text = _text_of(path)
        if text is None:
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
        dest = Path(folder) / "results"  # MLflow keeps only the file's name, not its folder, under dst_path
        dest.mkdir(parents=True, exist_ok=True)
        for name in names:
            local = self.client.download_artifacts(self.run_id, f"results/{name}.json", str(dest))
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
            name=self.redactor.text(identity.name),
            digest=identity.digest,
            source_type=identity.source_type,
            source=json.dumps({"uri": self.redactor.text(identity.source)}),
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
        with no_run_link_printed():
            self.client.set_terminated(self.run_id, status=status)

    @_to_store
    def reopen(self) -> None:
        """RUNNING again after ``finish``: a ModelAnalyzer logs each call's analyzer to one run."""
        self.client.update_run(self.run_id, status="RUNNING")

    def record(self, folder: Path) -> None:
        """Leave the run's id in the job's folder, so a launcher can end it if the job is killed."""
        import json

        self.folder = Path(folder)
        info = {"uri": without_credentials(self.uri), "run_id": self.run_id, "experiment": self.experiment}
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
        first = self.redactor.text((str(exc).strip().splitlines() or [type(exc).__name__])[0])[:200]
        where = self.folder or Path(".")
        print(
            f"modelxray: the tracking server {redact_text(self.uri)} stopped answering ({call}: {first}); "
            f"the analysis goes on and is kept in {where}; send it later: python scripts/sync_run.py {where}",
            file=sys.stderr,
        )
        if self.folder is not None:
            info = {"uri": without_credentials(self.uri), "run_id": self.run_id, "experiment": self.experiment}
            info["failed_call"] = call
            (self.folder / UNSYNCED_FILE).write_text(json.dumps({**info, "error": first}))

    def describe(self) -> str:
        where = f"MLflow run {self.run_id} in experiment {self.experiment!r} at {redact_text(self.uri)}"
        if self.offline:
            where += (
                f" (NOT SYNCED: the server stopped answering; send it with python scripts/sync_run.py {self.folder})"
            )
        return where

    def run_link(self, run_id: str | None = None) -> str | None:
        """The link to this run's page (or to ``run_id``'s, in the same experiment) in MLflow's UI, in
        its model-training view: on the server, or where ``mlflow ui`` serves a store file."""
        if self.offline:
            return None
        experiment_id = self.client.get_run(self.run_id).info.experiment_id
        base = without_credentials(self.uri) if self.uri.startswith(("http://", "https://")) else UI_DEFAULT
        return ui_url(base, experiment_id, run_id or self.run_id)

    @_to_store
    def set_description(self, text: str) -> None:
        """The run page's description (MLflow's ``mlflow.note.content`` tag), redacted like every text."""
        self.client.set_tag(self.run_id, "mlflow.note.content", self.redactor.text(text))

    def view_hint(self) -> str:
        """How to see the experiment's runs in MLflow's UI: the link on a server, the command and the
        link for a store file."""
        if self.offline:
            return ""
        experiment_id = self.client.get_run(self.run_id).info.experiment_id
        if self.uri.startswith(("http://", "https://")):
            return ui_url(without_credentials(self.uri), experiment_id)  # no credentials in a printed link
        return f"mlflow ui --backend-store-uri {redact_text(self.uri)}  then  {ui_url(UI_DEFAULT, experiment_id)}"
