"""Write a run's report directory: JSON, Markdown summary and insights, plots, tracebacks."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelxray.core.errors import OutputError
from modelxray.core.files import write_file
from modelxray.report.insights import collect_insights
from modelxray.report.markdown import display_name, insights_report, summary_report
from modelxray.report.result_file import check_entry, save_result
from modelxray.tracking.redact import Redactor

log = logging.getLogger(__name__)  # the run's log (run.log): a line per stage written, one for the report


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)  # JSON has no inf/nan
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):
        return _jsonable(obj.item())
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    return str(obj)


@dataclass
class Written:
    """The files one stage's Result left in the run directory, and why its figures failed, if they did."""

    paths: list[Path] = field(default_factory=list)
    plot_error: str | None = None


def write_result(out_dir: Path, name: str, result: Any) -> Written:
    """One stage's files, written as soon as it finishes: ``results/<name>.json`` (what a resumed run
    reloads), its traceback if it failed, its text and binary files (a failed stage's partial ones
    too) and the figures its source draws of whatever it measured. A broken figure is recorded,
    never allowed to lose the numbers."""
    written = Written([save_result(out_dir, name, result)])
    if not result.ok:
        p = out_dir / "errors" / f"{name}_traceback.txt"
        p.parent.mkdir(parents=True, exist_ok=True)
        write_file(p, result.error)
        written.paths.append(p)
    for fname, content in [*result.texts.items(), *result.files.items()]:  # a failed stage's partial files too
        p = out_dir / check_entry(fname, f"the {name} result")
        p.parent.mkdir(parents=True, exist_ok=True)
        write_file(p, content)
        written.paths.append(p)
    if result.source is not None and (result.ok or result.metrics):  # a failure with partial results draws them
        _draw(out_dir / "plots", result, written)
    _log_stage(name, result, written)
    return written


def _draw(plots_dir: Path, result: Any, written: Written) -> None:
    """The figures the result's source draws, into ``plots_dir``; a broken one is recorded in ``written``."""
    from modelxray.plotting import save, style

    plots_dir.mkdir(parents=True, exist_ok=True)
    with style():
        try:
            for fname, fig in result.source.figures(result).items():
                save(fig, plots_dir / fname)
                written.paths.append(plots_dir / fname)
        except OutputError:
            raise  # a file that cannot be written ends the run FAILED; results/<name>.json is saved
        except Exception as exc:  # noqa: BLE001 - a broken plot must not lose the run's numbers
            written.plot_error = f"{type(exc).__name__}: {exc}"


def _log_stage(name: str, result: Any, written: Written) -> None:
    """The stage's line in the run's log: how it ended, in how long, and what it left on disk."""
    state = "finished" if result.ok else "FAILED"
    plots = f"; its figures failed: {written.plot_error}" if written.plot_error else ""
    log.info("%s %s in %.1f s: %d files written%s", name, state, result.seconds, len(written.paths), plots)


def write_reports(
    out_dir: Path, run: dict, results: dict, dashboard: bool = True, written: dict[str, Written] | None = None
) -> list[Path]:
    """Write every report file into ``out_dir``; return their paths. Every artifact comes from a
    Result (its texts, files and the figures its source draws). ``written``: the stages whose files
    are on disk already (each analyzer's, written when it finished); the others are written now."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = dict(written or {})
    for name, result in results.items():
        if name not in written:
            written[name] = write_result(out_dir, name, result)
    plots_dir = out_dir / "plots"
    in_order = [written[n] for n in results]  # the run's order: train, quant, then the analyzers
    plot_files = [p for w in in_order for p in w.paths if p.parent == plots_dir]
    plot_errors = {n: written[n].plot_error for n in results if written[n].plot_error}
    if dashboard:
        from modelxray.plotting import style
        from modelxray.report.dashboard import write_dashboard

        path = plots_dir / "analysis_summary_dashboard.png"
        plots_dir.mkdir(exist_ok=True)
        with style():
            try:
                if write_dashboard(results, path, f"modelxray: {display_name(run['model']['name'])}"):
                    plot_files.append(path)
            except OutputError:
                raise
            except Exception as exc:  # noqa: BLE001
                plot_errors["dashboard"] = f"{type(exc).__name__}: {exc}"
    files = [p for w in in_order for p in w.paths if p not in plot_files]
    # the report shows the config and the overrides: their secrets masked, as in the tracking store
    redactor = Redactor.of_config(run.get("config"))
    run = redactor.tree(run)
    payload = {"run": run, "results": {n: r.to_json() for n, r in results.items()}, "plot_errors": plot_errors}
    p = out_dir / "analysis_results.json"
    write_file(p, redactor.text(json.dumps(_jsonable(payload), indent=2)))
    files.append(p)
    rel_plots = [f"plots/{f.name}" for f in plot_files]
    p = out_dir / "summary_report.md"
    write_file(p, redactor.text(summary_report(run, results, rel_plots)))
    files.append(p)
    sections = collect_insights(results)
    p = out_dir / "insights.md"
    write_file(p, redactor.text(insights_report(run["model"]["name"], sections, run["model"].get("notes", []))))
    files.append(p)
    log.info("report written: %s", out_dir / "summary_report.md")
    return files + plot_files
