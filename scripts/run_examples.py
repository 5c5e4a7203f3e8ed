"""Run every example under ``examples/`` as a user would (``python examples/<name>.py``), each in its
own process and a fresh temporary working folder; each example checks what it promises and exits
non-zero otherwise. Prints one line per example with its time, and exits 1 if any failed.

    python scripts/run_examples.py              # all of them (CI runs this)
    python scripts/run_examples.py seed000 seed004_minimal   # those whose names start so

Modules that examples import (``*_setup.py``) are not run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
NOT_EXAMPLES = ("_setup.py",)
TIMEOUT_S = 600


def examples(prefixes: list[str]) -> list[Path]:
    found = sorted(p for p in EXAMPLES.glob("*.py") if not p.name.endswith(NOT_EXAMPLES))
    return [p for p in found if not prefixes or p.stem.startswith(tuple(prefixes))]


def run(path: Path) -> tuple[bool, float, str]:
    """Run one example in a temporary folder; (passed, seconds, the tail of its output)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as cwd:
        try:
            proc = subprocess.run(
                [sys.executable, str(path)], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            return False, time.perf_counter() - start, f"did not finish in {TIMEOUT_S} s"
    tail = (proc.stdout + proc.stderr)[-2500:]
    return proc.returncode == 0, time.perf_counter() - start, tail


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefixes", nargs="*", help="run only examples whose names start with these")
    args = parser.parse_args()
    chosen = examples(args.prefixes)
    if not chosen:
        print(f"no example matches {args.prefixes}", file=sys.stderr)
        return 2
    failed = []
    for path in chosen:
        ok, seconds, tail = run(path)
        print(f"{'ok  ' if ok else 'FAIL'} {seconds:6.1f} s  examples/{path.name}", flush=True)
        if not ok:
            failed.append(path.name)
            print("     " + tail.replace("\n", "\n     "), flush=True)
    print(f"{len(chosen) - len(failed)} of {len(chosen)} examples passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
