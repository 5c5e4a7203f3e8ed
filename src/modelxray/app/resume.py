"""Where a run starts: skipped as FINISHED before, continued after the analyzers a stopped run
finished (their saved results loaded back), or new (``runtime.skip_finished``, ``runtime.resume``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from modelxray.core.result import Result

log = logging.getLogger(__package__)  # log lines keep the name modelxray.app


def _resume_point(runtime, tracker, config_hash: str) -> tuple[str | None, Any]:
    """Where this run starts (``runtime``: the ``runtime.*`` settings): ``("finished", (run id,
    metrics))`` when ``skip_finished`` finds the config FINISHED; ``(run id, analyzers done)`` to
    continue a run that stopped part-way (the one ``resume`` names, or the newest such run of this
    config under ``skip_finished``); else ``(None, [])``, a new run."""
    if runtime.resume:
        return str(runtime.resume), tracker.resumable(str(runtime.resume), config_hash)
    if not runtime.skip_finished:
        return None, []
    found = tracker.find_finished(config_hash)
    if found is not None:
        return "finished", found
    return tracker.find_resumable(config_hash) or (None, [])


def _earlier_results(tracker_run, out_dir: Path, analyzers: dict, done: list[str]) -> dict[str, Result]:
    """The results a resumed run finished before, loaded from its saved ``results/<name>.json`` and
    drawn by this run's analyzers; an analyzer whose file cannot be read runs again. A file that
    names a file outside the run folder stops the run (``UnsafeEntry``)."""
    from modelxray.report.result_file import UnsafeEntry, load_result

    wanted = [n for n in done if n in analyzers]
    out = {}
    for name, path in tracker_run.fetch_results(out_dir, wanted).items():
        try:
            out[name] = load_result(path, source=analyzers[name])
        except UnsafeEntry:
            raise  # a tampered result file stops the run, before anything is written
        except (OSError, ValueError, KeyError) as exc:
            log.warning("Running %s again: its saved result %s cannot be read (%s)", name, path, exc)
    return out
