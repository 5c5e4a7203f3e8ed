"""No secret reaches the tracking store, the run folder or the console: planted in every route a user
has (their own tags, the run name, the overrides, a secret-named key in any config node, a value
shaped like a secret under an innocent name, credentials in a URI, the tracking URI itself), then
searched for in the whole store (params, tags, every artifact), the run folder and what was printed.
The patterns themselves: ``test_secrets_by_shape.py``."""

from __future__ import annotations

import json
import logging
import os
import signal
import uuid
from pathlib import Path

import pytest
import yaml

import modelxray
from conftest import TINY_JOB, mlflow_runs


def _secrets() -> dict[str, str]:
    """Fresh values (the session's store holds other tests' runs): one per route."""
    tag = uuid.uuid4().hex[:10]
    return {
        "aws": f"wJalrXUtnFEMI/K7MDENG/{tag}EXAMPLEKEY",  # by name: AWS_SECRET_ACCESS_KEY
        "auth": f"eyJhbGciOiJIUzI1NiJ9.{tag}.c2ln",  # by name: Authorization, and shape: Bearer
        "db": f"S3cretPassw0rd-{tag}",  # by name: DB_PASSWORD
        "akia": "AKIA" + tag.upper().ljust(16, "Q")[:16],  # by shape, under an innocent name
        "bearer": f"innocentBearer{tag}",  # by shape, under an innocent name
        "uri": f"hunter2-{tag}",  # the password of a URI
        "pem": f"MIIEowIBAAKCAQEA{tag}planted",  # a PEM private key's body
        "nested": f"PlantedSecret-{tag}",  # by name, in a nested node, and again in the run name
    }


def _overrides(s: dict[str, str]) -> list[str]:
    return [
        f"+tracker.tags.AWS_SECRET_ACCESS_KEY={s['aws']}",
        f"+tracker.tags.Authorization='Bearer {s['auth']}'",
        f"+tracker.tags.DB_PASSWORD={s['db']}",
        f"+tracker.tags.note={s['akia']}",
        f"+tracker.tags.header='Bearer {s['bearer']}'",
        f"+tracker.tags.hub='https://bob:{s['uri']}@hub.example.org/models'",
        f"+tracker.tags.pem='-----BEGIN RSA PRIVATE KEY----- {s['pem']} -----END RSA PRIVATE KEY-----'",
        f"+tracker.tags.nested={{hf_token: {s['nested']}}}",
        f"tracker.run_name=nightly-{s['nested']}",
    ]


# Hydra's own record of the command as typed (it reruns the job): the user's, not a report
HYDRAS_RECORD = (".hydra", "multirun.yaml")


def _holding(root: Path, secrets: dict[str, str], skip: tuple[str, ...] = ()) -> list[str]:
    """``file: route`` for every file under ``root`` holding a secret in clear, but those in ``skip``."""
    found = []
    for path in (p for p in root.rglob("*") if p.is_file() and not set(skip) & set(p.relative_to(root).parts)):
        data = path.read_bytes()
        found += [f"{path}: {name}" for name, value in secrets.items() if value.encode() in data]
    return found


def _printed(text: str, secrets: dict[str, str]) -> list[str]:
    return [name for name, value in secrets.items() if value in text]


def _still_readable(root: Path) -> None:
    """Redacted files stay what they were: YAML that loads, JSON that parses."""
    for path in root.rglob("*"):
        if path.suffix in (".yaml", ".yml"):
            yaml.safe_load(path.read_text())
        elif path.suffix == ".json":
            json.loads(path.read_text())


def test_secrets_under_any_name_reach_neither_the_store_nor_the_run_folder_nor_the_console(
    tiny, tracking_uri, tmp_path, capfd, request
):
    s = _secrets()
    out = modelxray.analyze([*tiny, *_overrides(s)], output_dir=tmp_path / "run")
    assert not out.failed and out.run_id
    printed = capfd.readouterr()
    store = Path(tracking_uri.removeprefix("sqlite:///")).parent
    assert _holding(store, s) == [], "secrets in the store"
    assert _holding(tmp_path / "run", s) == [], "secrets in the run folder"
    assert _printed(printed.out + printed.err, s) == [], "secrets on the console"
    _, runs = mlflow_runs(tracking_uri, request.node.name)
    tags = next(r for r in runs if r.info.run_id == out.run_id).data.tags
    # each route reached the store, masked: by name whole, by shape only the secret
    assert tags["AWS_SECRET_ACCESS_KEY"] == tags["DB_PASSWORD"] == tags["Authorization"] == "***"
    assert (tags["note"], tags["header"]) == ("***", "Bearer ***")
    assert tags["hub"] == "https://***@hub.example.org/models" and tags["pem"] == "***"
    assert tags["mlflow.runName"] == "nightly-***"
    assert "+tracker.tags.DB_PASSWORD=***" in tags["modelxray.overrides"]
    _still_readable(tmp_path / "run")
    report = json.loads((tmp_path / "run" / "analysis_results.json").read_text())
    assert "***" not in json.dumps(report["results"])  # results are figures: nothing in them looks secret


def test_a_sweep_masks_its_parent_run_hydras_files_and_its_launcher_lines(cache_dir, tmp_path, monkeypatch, capfd):
    """A sweep adds routes: the parent run's sweep_config.yaml and sweep_overrides.txt, Hydra's
    ``.hydra/hydra.yaml`` (its ``override_dirname`` folds long values over lines) and the basic
    launcher's ``#0 : <overrides>`` console line."""
    from modelxray.cli import main
    from modelxray.tracking.redact import install_log_redaction

    s = _secrets()
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "store"
    store.mkdir()
    argv = ["-m", *TINY_JOB, "tracker=mlflow", f"dataset.cache_dir={cache_dir}", f"tracker.uri=sqlite:///{store}/m.db",
            "seed=0", f"hydra.sweep.dir={tmp_path}/multirun", *_overrides(s)]  # fmt: skip
    previous = logging.getLogRecordFactory()
    try:
        install_log_redaction()  # as modelxray.cli.main does, before Hydra logs anything
        assert main(argv) == 0
    finally:
        logging.setLogRecordFactory(previous)
    printed = capfd.readouterr()
    assert _holding(store, s) == [], "secrets in the store"
    assert _printed(printed.out + printed.err, s) == [], "secrets on the console"
    assert _holding(tmp_path / "multirun", s, skip=HYDRAS_RECORD) == [], "secrets in the reports"
    _still_readable(store)


@pytest.mark.slow  # starts an MLflow server
def test_credentials_in_the_tracking_uri_are_never_printed_nor_kept(cache_dir, tmp_path, capfd):
    """``tracker.uri=http://user:PASSWORD@host``: MLflow's own "View run ... at <URL>" line is not
    printed, the run folder keeps the URI without them, and the server holds none."""
    from test_dying_server import _server

    server = tmp_path / "server"
    server.mkdir()
    uri, proc = _server(server)
    password = f"pw-{uuid.uuid4().hex[:10]}"
    try:
        overrides = ["debug=tiny", f"dataset.cache_dir={cache_dir}", "analyzer.performance.iters=1"]
        overrides += ["analyzer.performance.layer_timing_iters=1", "tracker=mlflow_server"]
        out = modelxray.analyze(
            [*overrides, f"tracker.uri={uri.replace('//', f'//bob:{password}@')}"], output_dir=tmp_path / "run"
        )
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    printed = capfd.readouterr()
    assert not out.failed and out.run_id
    assert "View run" not in printed.out and password not in printed.out + printed.err
    assert _holding(tmp_path, {"password": password}) == []
    assert json.loads((tmp_path / "run" / "mlflow_run.json").read_text())["uri"] == uri
