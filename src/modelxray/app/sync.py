"""Send a finished run folder to a tracking store: what a run kept locally when its server stopped
answering (``tracking_unsynced.json`` in the folder), or any run made with ``tracker=none``.

The folder holds everything the run would have logged: its config and overrides
(``analysis_results.json``), each stage's result (``results/<name>.json``: metrics, tables, texts)
and its files (reports, plots). The run it started on the server is continued where it still
exists (its params are there), else a new run is made; every stage's metrics, the params and the
files are logged as the run would have, through the same tracker (so the same redaction), and the
run ends FINISHED, or FAILED where a stage failed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from modelxray.core.errors import ConfigError


def sync_run(folder: str | Path, uri: str | None = None, experiment: str | None = None) -> str:
    """Log the run kept in ``folder`` to ``uri`` (default: the store it was logging to); returns the
    run's description."""
    from modelxray.app.job import flatten
    from modelxray.report.result_file import RESULTS_DIR, load_result
    from modelxray.tracking.mlflow_run import RUN_FILE, UNSYNCED_FILE
    from modelxray.tracking.mlflow_tracker import MlflowTracker
    from modelxray.tracking.redact import Redactor

    folder = Path(folder).expanduser()
    summary = folder / "analysis_results.json"
    if not summary.is_file():
        raise ConfigError(str(folder), "holds no analysis_results.json: is it a modelxray run folder?")
    run_info = json.loads(summary.read_text())["run"]
    where = _where(folder, UNSYNCED_FILE, RUN_FILE)
    uri = uri or where.get("uri")
    if not uri:
        raise ConfigError("--uri", f"{folder} names no tracking store: give one (--uri sqlite:///mlflow.db)")
    config = run_info.get("config", {})
    tracker = MlflowTracker(uri=uri, experiment=experiment or where.get("experiment") or "modelxray")
    tracker.redactor = Redactor.of_config(_as_typed(folder, config))  # the values only the typed config knows
    tracker.check()
    run_id = where.get("run_id")  # looked for in the target store, wherever it is served now
    run = None
    if run_id and tracker.run_exists(run_id):
        run = tracker.resume(run_id, {"modelxray.synced_from": str(folder)})
    if run is None:  # the store does not hold the run it began: a new run holds it
        run = tracker.start(folder.name, {"modelxray.synced_from": str(folder), **_tags(run_info)})
        run.log_params({**flatten(config), **{k: str(v) for k, v in run_info.get("choices", {}).items()}})
    failed = False
    for path in sorted((folder / RESULTS_DIR).glob("*.json")):
        result = load_result(path)
        failed |= not result.ok
        metrics = {f"{path.stem}/{k}": v for k, v in result.finite_metrics().items()}
        run.log_metrics({**metrics, f"{path.stem}/seconds": result.seconds})
    run.log_artifacts(folder, exclude=("checkpoints",))
    run.finish("FAILED" if failed else "FINISHED")
    if run.offline:
        raise ConfigError("--uri", f"{uri} did not answer; nothing was lost: try again when it does")
    (folder / UNSYNCED_FILE).unlink(missing_ok=True)
    return run.describe()


def _where(folder: Path, *names: str) -> dict[str, Any]:
    for name in names:
        if (folder / name).is_file():
            return json.loads((folder / name).read_text())
    return {}


def _tags(run_info: dict) -> dict[str, str]:
    overrides = run_info.get("overrides") or []
    return {"modelxray.overrides": " ".join(map(str, overrides))} if overrides else {}


def _as_typed(folder: Path, config: dict) -> dict:
    """The run's config as Hydra wrote it (``.hydra/config.yaml``, where secrets stand in clear), so
    the store's copy is masked the same way as the run's own upload was; else the saved (masked) one."""
    typed = folder / ".hydra" / "config.yaml"
    if not typed.is_file():
        return config
    from omegaconf import OmegaConf

    try:
        return OmegaConf.to_container(OmegaConf.load(typed), resolve=False)
    except Exception:  # noqa: BLE001 - an unreadable copy: the saved config still masks by name and shape
        return config
