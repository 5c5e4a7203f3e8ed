"""Run every example under ``examples/`` as a user would (``python examples/<name>.py``), each in its
own process and a fresh temporary working folder; each example checks what it promises and exits
non-zero otherwise. Prints one line per example with its time, and exits 1 if any failed.

    python scripts/run_examples.py              # all of them, as many at once as there are cores (CI runs this)
    python scripts/run_examples.py model_analyzer learning_dynamics_minimal   # those whose names start so
    python scripts/run_examples.py --jobs 1     # one at a time (the times then are each example's own)
    python scripts/run_examples.py --timeout 900   # stop (and fail) an example that runs longer than 900 s

No example is stopped for taking long unless ``--timeout`` is given: on a loaded machine an example
may take many times its usual minute, and that is no failure of the example.

Modules that examples import (``*_setup.py``, such as ``learning_examples_setup.py``) are not run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
NOT_EXAMPLES = ("_setup.py",)


def examples(prefixes: list[str]) -> list[Path]:
    found = sorted(p for p in EXAMPLES.glob("*.py") if not p.name.endswith(NOT_EXAMPLES))
    return [p for p in found if not prefixes or p.stem.startswith(tuple(prefixes))]


def run(path: Path, threads: int | None = None, timeout_s: float | None = None) -> tuple[bool, float, str]:
    """Run one example in a temporary folder, with ``threads`` intra-op threads when several run at
    once (the cores are shared out, not oversubscribed), stopped after ``timeout_s`` seconds if given;
    (passed, seconds, the tail of its output)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"}
    if threads and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(threads)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as cwd:
        try:
            proc = subprocess.run(
                [sys.executable, str(path)], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s
            )
        except subprocess.TimeoutExpired:
            return False, time.perf_counter() - start, f"did not finish in {timeout_s:g} s (--timeout)"
    tail = (proc.stdout + proc.stderr)[-2500:]
    return proc.returncode == 0, time.perf_counter() - start, tail


def positive_seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text}: give a number of seconds above 0")
    return value


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Run every example under examples/ as a user would, each in its own process and temporary "
        "folder; exit 1 if any failed."
    )
    parser.add_argument("prefixes", nargs="*", help="run only examples whose names start with these")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="examples run at once (default: cores)")
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=None,
        metavar="SECONDS",
        help="stop an example after this many seconds and count it as failed (default: no limit, so a loaded "
        "machine that runs an example slowly does not fail it)",
    )
    args = parser.parse_args()
    chosen = examples(args.prefixes)
    if not chosen:
        print(f"no example matches {args.prefixes}", file=sys.stderr)
        return 2
    jobs = max(1, min(args.jobs, len(chosen)))
    threads = max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None
    failed = []
    start = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        running = {pool.submit(run, path, threads, args.timeout): path for path in chosen}
        for done in as_completed(running):
            path = running[done]
            ok, seconds, tail = done.result()
            print(f"{'ok  ' if ok else 'FAIL'} {seconds:6.1f} s  examples/{path.name}", flush=True)
            if not ok:
                failed.append(path.name)
                print("     " + tail.replace("\n", "\n     "), flush=True)
    took = time.perf_counter() - start
    print(f"{len(chosen) - len(failed)} of {len(chosen)} examples passed ({took:.0f} s, {jobs} at a time)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
