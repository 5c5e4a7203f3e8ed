"""The command line: a thin Hydra layer over ``modelxray.app.run``.

Start-up stays light: this module imports Hydra and OmegaConf only, so ``--help``, ``--cfg job`` and
a bad value answer before torch, transformers or mlflow load (the app is imported when a job runs).
"""

from __future__ import annotations

import contextvars
import signal
import sys
import threading

from omegaconf import DictConfig

from modelxray.core.errors import ConfigError

MULTIRUN_FLAGS = ("-m", "--multirun")


class Failures(list):
    """The jobs of one invocation that failed (analyzer tracebacks, or jobs a launcher saw die)."""


_FAILURES: contextvars.ContextVar[Failures | None] = contextvars.ContextVar("modelxray_failures", default=None)


def report_failure(what: str) -> None:
    """Record a failed job for this invocation's exit code (the launchers call this too)."""
    failures = _FAILURES.get()
    if failures is not None:
        failures.append(what)


def job_info():
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from modelxray.app import JobInfo, choices_of

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    return JobInfo(
        output_dir=hc.runtime.output_dir,
        choices=choices_of(hc),
        overrides=list(hc.overrides.task),
        sweep_dir=hc.sweep.dir if multirun else None,
        job_num=hc.job.num if multirun else None,
    )


def _raise_killed(signum, frame):
    from modelxray.app import JobKilled

    raise JobKilled(f"signal {signum}")


def task(cfg: DictConfig) -> dict[str, float]:
    """Hydra task function: one job. Config errors end the process with one line and exit code 2;
    SIGTERM (scancel, a SLURM timeout) ends the run KILLED rather than leaving it RUNNING."""
    from modelxray.config.components import validate_config

    try:
        validate_config(cfg)  # every check that needs no model, before the heavy imports
        from modelxray import app

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _raise_killed)
        outcome = app.run(cfg, job_info())
    except ConfigError as exc:
        print(f"modelxray: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if outcome.skipped:
        print(f"modelxray: {outcome.tracking}")
        return outcome.metrics
    print(f"modelxray: report  {outcome.output_dir}/summary_report.md")
    print(f"modelxray: tracking {outcome.tracking}")
    for name in outcome.failed:
        print(
            f"modelxray: analyzer {name!r} FAILED: see {outcome.output_dir}/errors/{name}_traceback.txt",
            file=sys.stderr,
        )
        report_failure(f"{outcome.output_dir}:{name}")
    return outcome.metrics


def normalize_argv(argv: list[str]) -> list[str]:
    """Hydra's parser wants ``-m`` before the overrides; accept it anywhere on the line."""
    flags = [a for a in argv if a in MULTIRUN_FLAGS]
    return flags[:1] + [a for a in argv if a not in MULTIRUN_FLAGS]


def main(argv: list[str] | None = None) -> int:
    """``python run.py [overrides] [-m]``: run the jobs, return the exit code (1 if any job failed)."""
    import hydra

    from modelxray.core.paths import conf_dir
    from modelxray.core.schema import register_schema

    register_schema()
    args = normalize_argv(sys.argv[1:] if argv is None else list(argv))
    failures = Failures()
    token = _FAILURES.set(failures)
    saved = sys.argv
    sys.argv = [saved[0] if saved else "run.py", *args]
    try:
        hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")(task)()
    finally:
        sys.argv = saved
        _FAILURES.reset(token)
    return 1 if failures else 0
