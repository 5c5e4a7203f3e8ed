"""Reaching and preparing an MLflow store: a writable SQLite folder or a tracking server that answers
(``check``), a new SQLite file seeded from an empty one made once per MLflow version, and the
experiment created with its kind and artifact location (parallel jobs may race to create it)."""

from __future__ import annotations

import os
import re
import tempfile
import threading
from pathlib import Path

from modelxray.core.errors import ConfigError
from modelxray.tracking.redact import redact_text

# a tracking server must answer GET /health within this many seconds (MLflow's client would retry
# an unreachable server for minutes before failing)
SERVER_PROBE_TIMEOUT_S = 3.0


def store_template(folder: Path) -> Path:
    """The empty SQLite store of this MLflow version in ``folder``, made by MLflow on first use."""
    from importlib.metadata import version

    template = folder / f"empty-mlflow-{version('mlflow')}.db"
    if template.exists():
        return template
    folder.mkdir(parents=True, exist_ok=True)
    building = folder / f".building-{os.getpid()}-{threading.get_ident()}.db"
    from mlflow.tracking import MlflowClient

    try:
        client = MlflowClient(tracking_uri=f"sqlite:///{building}")
        client.search_experiments()  # creates the schema at this version's head, and the Default experiment
        client._tracking_client.store.engine.dispose()
        os.replace(building, template)  # atomic: a parallel process sees no file or a whole one
    finally:
        building.unlink(missing_ok=True)  # a full disk leaves no half-built store behind
    return template


def copy_new(template: Path, db: Path) -> None:
    """Copy ``template`` to ``db`` unless ``db`` appeared meanwhile (another job seeded it)."""
    import shutil
    import sqlite3

    partial = db.with_name(f".{db.name}.{os.getpid()}-{threading.get_ident()}.part")
    try:
        shutil.copyfile(template, partial)
        with sqlite3.connect(partial) as con:  # MLflow's Default experiment keeps its artifacts under ./mlruns
            con.execute(
                "UPDATE experiments SET artifact_location = ? WHERE experiment_id = 0",
                (str(Path.cwd() / "mlruns" / "0"),),
            )
        con.close()
        os.link(partial, db)  # fails if db exists: never overwrite a store
    except FileExistsError:
        pass
    finally:
        partial.unlink(missing_ok=True)  # a full disk leaves no .part file beside the store


def folder_name(experiment: str) -> str:
    """An experiment name as one folder name (``a/b c`` -> ``a_b_c``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", experiment).strip("._") or "experiment"


def existing_parent(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (an artifact folder is created on first use)."""
    path = path.resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_writable(folder: Path, key: str, what: str) -> None:
    """A file can be created in ``folder`` (os.access says yes to root even where nothing can be)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ConfigError(
            key, f"the {what} is not writable ({exc.strerror or exc}); use a folder you can write to"
        ) from None


def check_server(uri: str) -> None:
    """A tracking server answers ``GET /health`` within ``SERVER_PROBE_TIMEOUT_S``: with 200 (an MLflow
    server), or 401/403 (a proxy asking for credentials, which MLflow then reports itself)."""
    import urllib.parse

    parts = urllib.parse.urlsplit(uri)
    netloc = parts.netloc.rsplit("@", 1)[-1]  # credentials are MLflow's business, not the probe's
    health = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/") + "/health", "", ""))
    why = health_problem(health, SERVER_PROBE_TIMEOUT_S)
    if why is not None:
        shown = redact_text(uri)
        raise ConfigError(
            "tracker.uri",
            f"no MLflow server answers at {shown} ({why}); start one (scripts/mlflow_server.sh) "
            "or log to a file: tracker.uri=sqlite:///mlflow.db",
        )


def health_problem(url: str, timeout_s: float) -> str | None:
    """None if ``url`` answered like an MLflow server within ``timeout_s``, else what went wrong. The
    request runs in a thread so a name lookup that hangs is bounded too."""
    outcome: list[str | None] = []
    thread = threading.Thread(target=lambda: outcome.append(get_health(url, timeout_s)), daemon=True)
    thread.start()
    thread.join(timeout_s)
    return outcome[0] if outcome else f"no answer within {timeout_s:g} s"


def get_health(url: str, timeout_s: float) -> str | None:
    import ssl
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(url, timeout=timeout_s).close()
    except urllib.error.HTTPError as exc:
        return None if exc.code in (401, 403) else f"GET /health answered HTTP {exc.code}: not an MLflow server?"
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ssl.SSLError):
            return None  # it answered; MLflow's own TLS settings decide whether that is fine
        return str(getattr(exc.reason, "strerror", None) or exc.reason)
    except OSError as exc:  # a timeout while reading, a reset connection
        return str(exc) or type(exc).__name__
    return None


# MLflow 3's UI opens an experiment on the view its kind names; ours are model runs (the runs table and
# charts), not GenAI traces
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


def get_or_create_experiment(client, name: str, artifact_location: str | None) -> str:
    from mlflow.exceptions import MlflowException

    exp = client.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            client.restore_experiment(exp.experiment_id)
        chosen = exp.tags.get(EXPERIMENT_KIND_TAG, "")
        if not chosen or chosen.endswith("_inferred") or chosen == "no_inferred_type":  # a type a person chose stays
            client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        return exp.experiment_id
    try:
        return client.create_experiment(
            name, artifact_location=artifact_location, tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND}
        )
    except MlflowException:  # created meanwhile by a parallel job
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id
