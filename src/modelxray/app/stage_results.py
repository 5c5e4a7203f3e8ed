"""One stage of a run and what it leaves: an analyzer run so that its failure is a Result, never the
run's, and a stage's files and metrics kept the moment it ends. The run and ModelAnalyzer share them."""

from __future__ import annotations

import time
import traceback
from pathlib import Path

from modelxray.core.result import Result, RunContext
from modelxray.core.subject import Subject
from modelxray.report.writer import Written, write_result


def keep_stage(name: str, result: Result, out_dir: Path, tracker_run, written: dict[str, Written]) -> None:
    """Save one stage the moment it ends: its files in the run directory (``results/<name>.json``,
    tables, plots) and its metrics and files in the tracker, so a later crash loses none of it."""
    tracker_run.log_metrics(  # the numbers first: a file that cannot be written loses none of them
        {**{f"{name}/{k}": v for k, v in result.finite_metrics().items()}, f"{name}/seconds": result.seconds}
    )
    written[name] = write_result(out_dir, name, result)
    tracker_run.log_files(out_dir, written[name].paths)


def run_stage(name: str, analyzer, subject: Subject, ctx: RunContext) -> Result:
    """Run one analyzer; a failure becomes a Result carrying its traceback, so the others still run."""
    start = time.perf_counter()
    try:
        result = analyzer.run(subject, ctx)
    except Exception:  # noqa: BLE001 - recorded and reported, never lost
        result = Result(name, error=traceback.format_exc(), source=analyzer)
    result.analyzer = name
    result.seconds = time.perf_counter() - start
    return result
