"""The command line: a thin Hydra layer over ``modelxray.app.run``."""

from __future__ import annotations

import signal
import sys
import threading

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from modelxray import app
from modelxray.errors import ConfigError

FAILED_JOBS: list[str] = []


def choices_of(hydra_cfg) -> dict[str, str]:
    """Config group choices of the run (``quant=int4``...), without Hydra's own groups (``hydra/...``,
    and groups packaged under ``hydra``, e.g. ``local@hydra.launcher``)."""
    return {
        k: str(v)
        for k, v in hydra_cfg.runtime.choices.items()
        if not k.startswith("hydra") and "@hydra" not in k and v is not None
    }


def job_info() -> app.JobInfo:
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    return app.JobInfo(
        output_dir=hc.runtime.output_dir,
        choices=choices_of(hc),
        overrides=list(hc.overrides.task),
        sweep_dir=hc.sweep.dir if multirun else None,
        job_num=hc.job.num if multirun else None,
    )


def _raise_killed(signum, frame):
    raise app.JobKilled(f"signal {signum}")


def task(cfg: DictConfig) -> dict[str, float]:
    """Hydra task function: one job. Config errors end the process with one line and exit code 2;
    SIGTERM (scancel, a SLURM timeout) ends the run KILLED rather than leaving it RUNNING."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_killed)
    try:
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
        FAILED_JOBS.append(f"{outcome.output_dir}:{name}")
    return outcome.metrics
