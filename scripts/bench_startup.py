"""Start-up time of the command line: ``--help``, ``--cfg job`` and a bad value's one-line error,
median of 5 runs each, against the 1 s target and against a bare ``python -c pass``.

    python scripts/bench_startup.py [--runs 5]

It times this checkout (``src/`` first on PYTHONPATH) and exits 1 if a command's exit code is not
the expected one, so a crash is never timed as a fast answer.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# name -> (command, expected exit code)
CASES = {
    "python -c pass (interpreter alone)": ([sys.executable, "-c", "pass"], 0),
    "run.py --help": ([sys.executable, "run.py", "--help"], 0),
    "run.py --cfg job": ([sys.executable, "run.py", "--cfg", "job"], 0),
    "run.py dataset.seq_len=-1 (one-line error)": ([sys.executable, "run.py", "dataset.seq_len=-1"], 2),
}
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}


def median_seconds(cmd: list[str], expected_rc: int, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - start)
        if proc.returncode != expected_rc:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
            raise SystemExit(f"{' '.join(cmd[1:])}: exit code {proc.returncode}, expected {expected_rc}\n{tail}")
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    base = None
    print(f"| command | median of {args.runs} (s) | x interpreter | under 1 s |")
    print("|---|---|---|---|")
    for name, (cmd, expected_rc) in CASES.items():
        t = median_seconds(cmd, expected_rc, args.runs)
        base = base or t
        print(f"| {name} | {t:.2f} | {t / base:.1f} | {'yes' if t < 1.0 else 'no'} |")


if __name__ == "__main__":
    main()
