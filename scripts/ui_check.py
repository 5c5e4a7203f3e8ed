"""Open MLflow's UI on a sweep's store in headless Chromium, save screenshots, and check from the page
what a person comparing runs needs to see.

    python scripts/ui_check.py                        # makes a two-job sweep in a temp folder first
    python scripts/ui_check.py --store path/to/dir    # a folder with mlflow.db from an earlier sweep
    python scripts/ui_check.py --out docs/images/mlflow_ui

It starts ``mlflow ui`` on the store with one worker (``--workers 1``: on a loaded machine MLflow's
default four uvicorn workers die and restart for minutes) and waits for it to answer ``/health`` up
to ``--ui-timeout`` seconds (default 600), then in the browser: the experiment's runs table (the sweep's
parent run expanded to its jobs), the charts view, the compare view of the jobs, and the parent run's
comparison. It checks that the runs table opens (not the GenAI overview), that the jobs are listed
under their distinct readable names with their dataset, that the compare view shows both names
and the headline metrics with their values, that a direct link opens a run's page in the
model-training view with its description (the headline), and that comparison.md holds top-1
agreement and KL. Exit code 1 names each check that failed.

Needs Chromium (Debian's ``chromium``; ``--chromium`` or ``$CHROMIUM`` for another binary) and the
``playwright`` package (``pip install playwright``; it drives the installed Chromium, nothing is
downloaded).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SWEEP = [
    "-m",
    "model=tiny_gpt2",
    "quant=none,int4",
    "dataset.max_tokens=1024",
    "analyzer=[performance]",
    "analyzer.performance.layer_timing=false",
    "progress=false",
]
VIEW = "workflowType=machine_learning"
HEADLINE = ("performance/perplexity", "performance/accuracy")


def find_chromium(given: str | None = None) -> str | None:
    for candidate in (given, os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if candidate and (path := shutil.which(candidate)):
            return path
    return None


def make_sweep(folder: Path) -> None:
    """The two-job sweep the UI is checked on, logged to ``folder/mlflow.db``."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, str(REPO / "run.py"), *SWEEP, f"hydra.sweep.dir={folder}/multirun"]
    subprocess.run(cmd, cwd=folder, env=env, check=True, stdout=subprocess.DEVNULL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


UI_TIMEOUT_S = 600.0  # a loaded 2-core machine takes minutes to bring MLflow's server up
UI_WORKERS = 1  # one uvicorn worker: fewer processes to start, none to die and restart under load


def ui_command(store: Path, port: int, workers: int = UI_WORKERS) -> list[str]:
    """The ``mlflow ui`` command serving ``store/mlflow.db`` on ``127.0.0.1:port``."""
    return [
        "mlflow",
        "ui",
        "--backend-store-uri",
        f"sqlite:///{store}/mlflow.db",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]


def start_ui(store: Path, port: int, timeout_s: float = UI_TIMEOUT_S, workers: int = UI_WORKERS) -> subprocess.Popen:
    """``mlflow ui`` on ``store/mlflow.db``, once it answers ``/health`` (within ``timeout_s``)."""
    log = open(store / "mlflow_ui.log", "w")  # noqa: SIM115 - open while the server runs
    proc = subprocess.Popen(
        ui_command(store, port, workers),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: stop_ui ends MLflow's job runner with it
    )
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"ui_check: mlflow ui exited ({proc.returncode}); see {store / 'mlflow_ui.log'}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).close()
            return proc
        except OSError:
            time.sleep(1)
    stop_ui(proc)
    raise SystemExit(
        f"ui_check: mlflow ui did not answer within {timeout_s:g} s (--ui-timeout to wait longer); "
        f"see {store / 'mlflow_ui.log'}"
    )


def stop_ui(proc: subprocess.Popen) -> None:
    """End ``mlflow ui`` and what it started (uvicorn, the job runner and its consumers)."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def sweep_runs(store: Path) -> tuple[str, dict, list[dict]]:
    """The experiment id, the newest sweep's parent run and its jobs (id, name, metrics)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store}/mlflow.db")
    exp = client.get_experiment_by_name("modelxray")
    if exp is None:
        raise SystemExit(f"ui_check: no experiment 'modelxray' in {store}/mlflow.db")
    parents = client.search_runs(
        [exp.experiment_id], "tags.`modelxray.sweep_parent` = 'true'", order_by=["attributes.start_time DESC"]
    )
    if not parents:
        raise SystemExit(f"ui_check: no sweep in {store}/mlflow.db; run a sweep (python run.py -m ...) first")
    parent = parents[0]
    jobs = client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    rows = [
        {
            "id": r.info.run_id,
            "name": r.info.run_name,
            "metrics": r.data.metrics,
            "description": r.data.tags.get("mlflow.note.content", ""),
        }
        for r in jobs
    ]
    return exp.experiment_id, {"id": parent.info.run_id, "name": parent.info.run_name}, rows


def comparison_text(store: Path, parent_id: str) -> str:
    """The sweep parent's comparison.md, as stored."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store}/mlflow.db")
    with tempfile.TemporaryDirectory() as tmp:
        return Path(client.download_artifacts(parent_id, "comparison.md", tmp)).read_text()


def check(store: Path, out: Path, chromium: str, port: int) -> list[str]:
    """Screenshots into ``out``; the checks that failed (empty: all passed)."""
    from playwright.sync_api import sync_playwright

    exp_id, parent, jobs = sweep_runs(store)
    base = f"http://127.0.0.1:{port}/#"
    failed: list[str] = []

    def expect(ok: bool, what: str) -> None:
        print(f"  {'ok  ' if ok else 'FAIL'} {what}")
        if not ok:
            failed.append(what)

    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        fresh = lambda: browser.new_page(viewport={"width": 1680, "height": 960})  # noqa: E731 - each view loads anew
        page = fresh()
        page.goto(f"{base}/experiments/{exp_id}/runs?{VIEW}")
        page.get_by_text(parent["name"]).first.wait_for(timeout=60_000)
        name_cell = page.locator("[role=gridcell][col-id='attributes.`Run Name`']", has_text=parent["name"]).first
        name_cell.locator("button").first.click()  # expand the sweep to its jobs
        for job in jobs:
            page.get_by_text(job["name"], exact=True).first.wait_for(timeout=30_000)
        _close_assistant(page)
        page.screenshot(path=str(out / "runs_table.png"))
        body = page.inner_text("body")
        expect("Runs" in body and "No data available" not in body, "the experiment opens on its runs table")
        expect(len({j["name"] for j in jobs}) == len(jobs) >= 2, f"the sweep's {len(jobs)} jobs have distinct names")
        expect(
            all(j["name"] in body for j in jobs),
            "every job is listed under its name: " + ", ".join(j["name"] for j in jobs),
        )
        expect(parent["name"] in body, f"the sweep's parent run is listed: {parent['name']}")
        expect("pydoc_topics" in body, "the dataset column shows the dataset (pydoc_topics)")

        page = fresh()
        page.goto(f"{base}/experiments/{exp_id}/runs?{VIEW}&compareRunsMode=CHART")
        page.get_by_text(parent["name"][:20]).first.wait_for(timeout=60_000)
        _close_assistant(page)
        cell = page.locator("[role=gridcell]", has_text=parent["name"][:20]).first
        if cell.count():
            cell.locator("button").first.click()  # the sweep's jobs, so their charts are drawn
        page.wait_for_timeout(3000)
        page.screenshot(path=str(out / "charts.png"))
        body = page.inner_text("body")
        # a section's name and its chart count: "headline (7)", on one line or two
        sections = re.findall(r"^([a-z_]+)\s*\(\d+\)", body, flags=re.MULTILINE)
        expect(
            sections[:1] == ["_headline"] and {"performance", "quant"} <= set(sections),
            f"charts are grouped by analyzer, the jobs' headline first: {', '.join(sections)}",
        )

        compare = (
            f"{base}/compare-runs?runs={json.dumps([j['id'] for j in jobs])}&experiments={json.dumps([exp_id])}&{VIEW}"
        )
        page = fresh()
        page.goto(compare)
        page.get_by_text("Run details").first.wait_for(timeout=60_000)
        _close_assistant(page)
        page.screenshot(path=str(out / "compare.png"), full_page=True)
        body = page.inner_text("body")
        expect(all(j["name"] in body for j in jobs), "the compare view names both jobs")
        expect(
            "MCP registry" not in body and "Prompts" not in body, "the compare view opens in the model-training view"
        )
        for metric in HEADLINE:
            values = [_shown(j["metrics"].get(metric)) for j in jobs]
            page = fresh()  # its metric table scrolled from the top
            page.goto(compare)
            shown = metric_row(page, metric)
            expect(
                sorted(shown) == sorted(values),
                f"the compare view shows {metric} for both jobs: {', '.join(shown) or 'nothing'} "
                f"(logged: {', '.join(values)})",
            )

        # a job's own page from a direct link (as the report and comparison.md link it)
        job = jobs[0]
        body = _shoot(fresh(), f"{base}/experiments/{exp_id}/runs/{job['id']}?{VIEW}", out / "run_page.png")
        expect(
            "Model metrics" in body and "Evaluations" not in body and "Description" in body,
            "a direct link opens the run page in the model-training view (not the GenAI view)",
        )
        headline = next((ln for ln in job["description"].splitlines() if "perplexity" in ln), "")
        expect(
            bool(job["description"]) and "perplexity" in body and job["name"] in body,
            f"the run page shows its description, the headline: {headline[:80]}",
        )
        text = comparison_text(store, parent["id"])
        expect(
            "performance/top1_agree" in text and "performance/kl" in text and VIEW in text,
            "comparison.md holds top-1 agreement and KL, and links each job in the model-training view",
        )

        parent_page = f"{base}/experiments/{exp_id}/runs/{parent['id']}/artifacts/comparison.md?{VIEW}"
        body = _shoot(fresh(), parent_page, out / "sweep_parent.png")
        expect(
            "comparison.md" in body and "pareto.png" in body,
            "the sweep's parent run holds comparison.md and pareto.png",
        )
        browser.close()
    return failed


def _shoot(page, url: str, path: Path, settle_ms: int = 5000) -> str:
    """Open ``url``, let it draw, screenshot it to ``path``; the page's text."""
    page.goto(url)
    page.wait_for_timeout(settle_ms)
    _close_assistant(page)
    page.screenshot(path=str(path))
    return page.inner_text("body")


def _close_assistant(page) -> None:
    """MLflow's assistant side panel opens by default and covers a third of the page."""
    close = page.locator("button[aria-label='Close']").last
    try:
        if close.is_visible(timeout=1000):
            close.click()
            page.wait_for_timeout(500)
    except Exception:  # noqa: BLE001 - no panel in this MLflow version
        pass


_SCROLL_BOTH = """(top) => {
  const [names, values] = document.querySelectorAll('.ReactVirtualized__Grid');
  const done = values.scrollTop + values.clientHeight >= values.scrollHeight - 1;
  values.scrollTop = top;  // the page scrolls the names with the values, on the values' scroll events
  values.dispatchEvent(new Event('scroll'));
  return !done;
}"""
# a cell of the names grid and the cells of the values grid share their row's ``top`` offset
_READ_ROW = """(name) => {
  const cells = (g) => [...g.querySelector('.ReactVirtualized__Grid__innerScrollContainer').children];
  const [names, values] = document.querySelectorAll('.ReactVirtualized__Grid');
  const row = cells(names).find(c => c.innerText.trim() === name);
  if (!row) return [];
  return cells(values).filter(c => c.style.top === row.style.top)
    .sort((a, b) => parseFloat(a.style.left) - parseFloat(b.style.left)).map(c => c.innerText.trim());
}"""


def metric_row(page, name: str) -> list[str]:
    """The values the compare view shows for metric ``name``, one per run, in the runs' order. Its
    metric table is two virtualised grids, names and values side by side, that draw only the rows
    in view and scroll together: scroll a step at a time until the row is drawn, read across."""
    page.locator(".ReactVirtualized__Grid__innerScrollContainer > *").first.wait_for(timeout=30_000)
    page.evaluate(_SCROLL_BOTH, 0)
    page.wait_for_timeout(1000)
    for top in range(0, 50_000, 200):
        page.wait_for_timeout(300)
        if shown := page.evaluate(_READ_ROW, name):
            return shown
        if not page.evaluate(_SCROLL_BOTH, top + 200):
            return []
    return []


def _shown(value) -> str:
    """A metric as MLflow's UI prints it (``Utils.formatMetric``: 3 decimals below 10, 2 below 100,
    else 1; trailing zeros dropped)."""
    if value is None:
        return "-"
    digits = 3 if abs(value) < 10 else 2 if abs(value) < 100 else 1
    text = f"{round(value, digits):.{digits}f}".rstrip("0").rstrip(".")
    return text or "0"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=None, help="a folder holding mlflow.db with a sweep (default: make one)")
    ap.add_argument("--out", default="mlflow_ui_screenshots", help="where the screenshots go")
    ap.add_argument("--chromium", default=None, help="the Chromium binary (default: chromium on PATH)")
    ap.add_argument("--port", type=int, default=0, help="the port for mlflow ui (default: a free one)")
    ap.add_argument(
        "--ui-timeout",
        type=float,
        default=UI_TIMEOUT_S,
        help=f"seconds to wait for mlflow ui to answer /health (default: {UI_TIMEOUT_S:g}; a loaded machine "
        "needs minutes)",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=UI_WORKERS,
        help=f"uvicorn workers of mlflow ui (default: {UI_WORKERS}; MLflow's own default is 4)",
    )
    args = ap.parse_args()
    chromium = find_chromium(args.chromium)
    if chromium is None:
        print("ui_check: no Chromium found; install Debian's chromium or pass --chromium", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="modelxray_ui_") as tmp:
        store = Path(args.store).resolve() if args.store else Path(tmp)
        if args.store is None:
            print(f"ui_check: a two-job sweep into {store} ...")
            make_sweep(store)
        port = args.port or free_port()
        server = start_ui(store, port, args.ui_timeout, args.workers)
        try:
            print(f"ui_check: MLflow UI at http://127.0.0.1:{port} on {store}/mlflow.db")
            failed = check(store, Path(args.out), chromium, port)
        finally:
            stop_ui(server)
    print(f"ui_check: screenshots in {args.out}")
    if failed:
        print(f"ui_check: {len(failed)} check(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
