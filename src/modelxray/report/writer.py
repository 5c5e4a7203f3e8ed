"""Write a run's report directory: JSON, Markdown summary and insights, plots, tracebacks."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from modelxray.report.insights import collect_insights
from modelxray.report.markdown import insights_report, summary_report


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


def write_reports(out_dir: Path, run: dict, results: dict, dashboard: bool = True) -> list[Path]:
    """Write every report file into ``out_dir``; return their paths. Every artifact comes from a
    Result (its texts, files and the figures its source draws); plotting failures are recorded,
    never allowed to lose the numbers."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    plots_dir = out_dir / "plots"
    plots_dir.mkdir(exist_ok=True)
    plot_files, plot_errors = _write_plots(plots_dir, results, run, dashboard)
    errors_dir = out_dir / "errors"
    for name, result in results.items():
        if not result.ok:
            errors_dir.mkdir(exist_ok=True)
            p = errors_dir / f"{name}_traceback.txt"
            p.write_text(result.error)
            written.append(p)
    for result in results.values():
        if not result.ok:
            continue
        for fname, text in result.texts.items():
            p = out_dir / fname
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
            written.append(p)
        for fname, blob in result.files.items():
            p = out_dir / fname
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(blob)
            written.append(p)
    payload = {"run": run, "results": {n: r.to_json() for n, r in results.items()}, "plot_errors": plot_errors}
    p = out_dir / "analysis_results.json"
    p.write_text(json.dumps(_jsonable(payload), indent=2))
    written.append(p)
    rel_plots = [f"plots/{f.name}" for f in plot_files]
    p = out_dir / "summary_report.md"
    p.write_text(summary_report(run, results, rel_plots))
    written.append(p)
    sections = collect_insights(results)
    p = out_dir / "insights.md"
    p.write_text(insights_report(run["model"]["name"], sections, run["model"].get("notes", [])))
    written.append(p)
    return written + plot_files


def _write_plots(plots_dir: Path, results: dict, run: dict, dashboard: bool) -> tuple[list[Path], dict[str, str]]:
    from modelxray.plotting import save, style
    from modelxray.report.dashboard import write_dashboard

    files, errors = [], {}
    with style():
        for name, result in results.items():
            if result.source is None or not result.ok:
                continue
            try:
                for fname, fig in result.source.figures(result).items():
                    save(fig, plots_dir / fname)
                    files.append(plots_dir / fname)
            except Exception as exc:  # noqa: BLE001 - a broken plot must not lose the run's numbers
                errors[name] = f"{type(exc).__name__}: {exc}"
        if dashboard:
            path = plots_dir / "analysis_summary_dashboard.png"
            try:
                if write_dashboard(results, path, f"modelxray: {run['model']['name']}"):
                    files.append(path)
            except Exception as exc:  # noqa: BLE001
                errors["dashboard"] = f"{type(exc).__name__}: {exc}"
    return files, errors
