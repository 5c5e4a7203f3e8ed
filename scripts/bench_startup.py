"""Start-up time of the command line: ``--help`` and ``--cfg job`` (target 0.5 s) and a bad value's
one-line error (target 0.7 s), and how long a tracking store or model hub that cannot work takes to be
refused in one line (target 5 s; MLflow's and the hub clients' retry loops took 34 to 250 s), each
the median of 5 runs, against a bare ``python -c pass``.

    python scripts/bench_startup.py [--runs 5]

It times this checkout (``src/`` first on PYTHONPATH) and exits 1 if a command's exit code is not
the expected one, so a crash is never timed as a fast answer. These durations live here, not in the
tests: ``tests/test_bad_input.py`` checks the same refusals by their behaviour (the one line, exit
code 2, no retry loop), which a loaded machine cannot fail.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELP_S, ERROR_S, REFUSE_S = 0.5, 0.7, 5.0  # targets: help and config; a bad value's line; a store or hub refused
TRACKER = ["model=tiny_gpt2", "tracker=mlflow"]
NOT_CACHED = "is not in the local Hugging Face cache"
HUB = ["model=hf", "model.name_or_path=someone/some-model", "tracker=none"]
# name -> (arguments of run.py, or None for the bare interpreter; expected exit code; target in s;
# extra environment; text its stderr must hold). {port} is a port nothing listens on.
CASES = {
    "python -c pass (interpreter alone)": (None, 0, None, {}, ""),
    "run.py --help": (["--help"], 0, HELP_S, {}, ""),
    "run.py --cfg job": (["--cfg", "job"], 0, HELP_S, {}, ""),
    "run.py dataset.seq_len=-1 (one-line error)": (["dataset.seq_len=-1"], 2, ERROR_S, {}, "dataset.seq_len"),
    "unwritable SQLite folder (tracker.uri=sqlite:////proc/mlflow.db)": (
        [*TRACKER, "tracker.uri=sqlite:////proc/mlflow.db"],
        2,
        REFUSE_S,
        {},
        "is not writable",
    ),
    "a sweep on that store (-m quant=none,int8), stopped before any job": (
        ["-m", *TRACKER, "quant=none,int8", "tracker.uri=sqlite:////proc/mlflow.db"],
        2,
        REFUSE_S,
        {},
        "is not writable",
    ),
    "no tracking server listening (tracker=mlflow_server)": (
        ["model=tiny_gpt2", "tracker=mlflow_server", "tracker.uri=http://127.0.0.1:{port}"],
        2,
        REFUSE_S,
        {},
        "no MLflow server answers",
    ),
    "hub model not cached, HF_HUB_OFFLINE=1": (HUB, 2, REFUSE_S, {"HF_HUB_OFFLINE": "1"}, NOT_CACHED),
    "hub model not cached, hub endpoint unreachable": (
        HUB,
        2,
        REFUSE_S,
        {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:{port}"},
        NOT_CACHED,
    ),
}
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(args: list[str] | None, tmp: str, port: int) -> list[str]:
    if args is None:
        return [sys.executable, "-c", "pass"]
    filled = [a.format(tmp=tmp, port=port) for a in args]
    if filled[0].startswith("--"):  # --help, --cfg: nothing is written
        return [sys.executable, "run.py", *filled]
    return [sys.executable, "run.py", f"hydra.run.dir={tmp}/out", f"hydra.sweep.dir={tmp}/sweep", *filled]


def median_seconds(args: list[str] | None, expected_rc: int, extra_env: dict[str, str], said: str, runs: int) -> float:
    """The median wall time of ``runs`` runs; exits if a run's exit code or message is not the expected one."""
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="bench_startup_") as tmp:
            port = free_port()
            cmd = command(args, tmp, port)
            env = {**ENV, "HF_HOME": f"{tmp}/hf", **{k: v.format(port=port) for k, v in extra_env.items()}}
            start = time.perf_counter()
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
            times.append(time.perf_counter() - start)
        if proc.returncode != expected_rc or said not in proc.stderr:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
            raise SystemExit(
                f"{' '.join(cmd[1:])}: exit code {proc.returncode}, expected {expected_rc}"
                + (f" with {said!r} in stderr" if said else "")
                + f"\n{tail}"
            )
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each command; the median is shown")
    parser.add_argument("--only", default="", help="only the cases whose names contain this text (and the interpreter)")
    args = parser.parse_args()
    base = None
    load = os.getloadavg()[0]
    print(f"load average {load:.2f} (1 minute) on {os.cpu_count()} CPUs{'; a busy machine' if load > 0.5 else ''}")
    print(f"| command | median of {args.runs} (s) | x interpreter | target (s) | within target |")
    print("|---|---|---|---|---|")
    for name, (cmd, expected_rc, target, env, said) in CASES.items():
        if args.only and cmd is not None and args.only not in name:
            continue
        t = median_seconds(cmd, expected_rc, env, said, args.runs)
        base = base or t
        within = "-" if target is None else "yes" if t < target else "no"
        print(f"| {name} | {t:.2f} | {t / base:.1f} | {target or '-'} | {within} |", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
