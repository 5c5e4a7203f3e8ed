"""Every duration the README promises, measured: each "First commands" line run as a new user runs it
(its own folder, so its outputs and MLflow store start empty), timed end to end, against the time the
README states. The table goes to docs/benchmarks.md with its date, the machine and its load, so the
README's words can be checked against a measurement rather than a memory.

    python scripts/time_readme.py                    # every command, about 12 minutes on 2 idle cores
    python scripts/time_readme.py --only tiny grok   # the commands whose label holds one of these words
    python scripts/time_readme.py --loaded           # each also beside 2 busy processes: how much slower
    python scripts/time_readme.py --check            # exit 1 if a command took longer than its promise

A machine busy with other work (more than a quarter of its CPU time busy in the second before a
command) is named in the table; durations measured on one are not what the README should promise. ``--loaded`` runs each
command a second time beside as many CPU-bound processes as there are cores and reports the ratio:
what a newcomer on a shared machine will see.
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from doc_blocks import update  # noqa: E402

SCRIPT = "time_readme.py"
BUSY_SHARE = 0.25  # share of the CPUs' time busy in the second before a command above which the machine is not idle
# (label, arguments of run.py, the README's promise in seconds, the README's words); a fresh model
# cache (first run) where the README promises a first-run time
COMMANDS = [
    ("debug=tiny", ["debug=tiny"], 10, '"in seconds"'),
    ("embedded default, first run", [], 120, '"about 1.5 minutes ... the first time"'),
    ("embedded default, cached", [], 60, '"later runs ... take about 45 s in all"'),
    ("robustness sweep", ["analyzer=robustness", "quant=int4,int8", "-m"], 420, '"about 7 minutes"'),
    ("digits_vit, two analyzers", ["model=digits_vit", "analyzer=[performance,robustness]"], 60, '"in about a minute"'),
    ("experiment=grokking", ["experiment=grokking"], 60, '"about a minute"'),
]
FIRST_RUN = "first run"


def _spin(stop) -> None:
    while not stop.is_set():
        pass


def _busy(n: int):
    """``n`` CPU-bound processes until the returned event is set."""
    stop = mp.Event()
    procs = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    return stop, procs


def cpu_busy(seconds: float = 1.0) -> float:
    """The share of all CPUs' time spent busy (not idle, not waiting on disk) over the next ``seconds``:
    what else runs right now. The load average would not do: it still counts the previous command
    for a minute after it ended."""

    def sample() -> tuple[int, int]:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return values[3] + values[4], sum(values)  # idle + iowait, all

    try:
        idle0, total0 = sample()
        time.sleep(seconds)
        idle1, total1 = sample()
    except OSError:  # no /proc (macOS): the 1-minute load average per core instead
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    return 1.0 - (idle1 - idle0) / max(total1 - total0, 1)


def time_command(args: list[str], fresh_cache: bool) -> tuple[float, float, int]:
    """Wall seconds of ``python run.py ARGS`` in a new folder, the CPUs' busy share before it, exit code."""
    with tempfile.TemporaryDirectory() as work:
        extra = [f"model.cache_dir={work}/cache"] if fresh_cache else []
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")}
        load = cpu_busy()
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, str(ROOT / "run.py"), *args, *extra], cwd=work, env=env, capture_output=True, text=True
        )
        wall = time.perf_counter() - start
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
    return wall, load, proc.returncode


def _duration(s: float) -> str:
    return f"{s:.1f} s" if s < 90 else f"{s / 60:.1f} min"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None, help="commands whose label holds one of these words")
    parser.add_argument("--loaded", action="store_true", help="also time each beside as many busy processes as cores")
    parser.add_argument("--check", action="store_true", help="exit 1 if a command took longer than its promise")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args()
    chosen = [c for c in COMMANDS if not args.only or any(w in c[0] for w in args.only)]
    cores = os.cpu_count() or 1
    head = "| command | README says | measured | within | CPUs busy before |" + (
        " beside busy cores |" if args.loaded else ""
    )
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    late, failed = [], []
    for label, run_args, promise, words in chosen:
        wall, load, code = time_command(run_args, FIRST_RUN in label)
        if code != 0:
            failed.append(label)
        busy = " (busy)" if load > BUSY_SHARE else ""
        within = "yes" if wall <= promise else f"**no** ({wall / promise:.1f}x)"
        line = (
            f"| `python run.py {' '.join(run_args)}`".rstrip()
            + f" ({label}) | {words} | {_duration(wall)} | {within} | {load:.0%}{busy} |"
        )
        if args.loaded:
            stop, procs = _busy(cores)
            try:
                loaded, _, _ = time_command(run_args, FIRST_RUN in label)
            finally:
                stop.set()
                for p in procs:
                    p.join()
            line += f" {_duration(loaded)} ({loaded / wall:.1f}x) |"
        rows.append(line)
        print(line, flush=True)
        if wall > promise:
            late.append(label)
    stamp = (
        f"Measured {dt.date.today().isoformat()} by `python scripts/{SCRIPT}`"
        f"{' --loaded' if args.loaded else ''} on {cores} cores ({platform.processor() or platform.machine()}),"
        f" each command in a new folder."
    )
    table = "\n".join([stamp, "", *rows])
    print(table)
    if not args.no_write and not args.only:
        update(ROOT / "docs" / "benchmarks.md", {"readme-timings": table}, SCRIPT, check=False)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    if args.check and late:
        print(f"longer than the README says: {', '.join(late)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
