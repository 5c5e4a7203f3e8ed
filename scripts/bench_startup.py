"""Start-up time of the command line: ``--help``, ``--cfg job`` and a bad value's one-line error,
median of 5 runs each, against the 1 s target and against a bare ``python -c pass``.

    python scripts/bench_startup.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "python -c pass (interpreter alone)": [sys.executable, "-c", "pass"],
    "run.py --help": [sys.executable, "run.py", "--help"],
    "run.py --cfg job": [sys.executable, "run.py", "--cfg", "job"],
    "run.py dataset.seq_len=-1 (one-line error)": [sys.executable, "run.py", "dataset.seq_len=-1"],
}


def median_seconds(cmd: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    base = None
    print(f"| command | median of {args.runs} (s) | x interpreter | under 1 s |")
    print("|---|---|---|---|")
    for name, cmd in CASES.items():
        t = median_seconds(cmd, args.runs)
        base = base or t
        print(f"| {name} | {t:.2f} | {t / base:.1f} | {'yes' if t < 1.0 else 'no'} |")


if __name__ == "__main__":
    main()
