"""Submitit launchers (SLURM and local) that wait for every job and say which failed and where.

hydra-submitit-launcher 1.2 collects results with ``[j.results()[0] for j in jobs]``: the first
job that died without a result (killed by SLURM, out of memory, a config error that exits)
raises there, the jobs after it are no longer awaited, and no log path is printed. These
subclasses submit exactly as the stock ones do, then wait for all jobs, print one line per failed
job with its scheduler state and log files, and mark a failed job's MLflow run KILLED if the job
died before it could. A job that finished but whose analyzers raised (its run ended FAILED, the
tracebacks are in its ``errors/`` folder) counts as failed too, as it does with Hydra's basic
launcher. Lives under ``hydra_plugins`` because Hydra only loads launchers from there; imports stay light because Hydra imports every plugin at start-up."""

from __future__ import annotations

import contextlib
import functools
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from omegaconf import OmegaConf

from hydra_plugins.hydra_submitit_launcher import submitit_launcher as stock
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

log = logging.getLogger(__name__)


class _WaitForAll:
    _EXECUTOR: str

    def __call__(self, *args, **kwargs) -> JobReturn:
        """One job, in its own process: submitit ignores SIGTERM there (it waits for a requeue), so a
        job told to stop (scancel, a time limit, a stopped sweep) would run on; it ends KILLED instead.
        The job composes its config again there: the code it names is checked as in the submitting
        process (``config.code_guard``)."""
        from modelxray.config.code_guard import guarded

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _raise_killed)
        with guarded():
            return super().__call__(*args, **kwargs)

    def _executor(self):
        """The executor exactly as the stock launcher configures it."""
        import submitit

        params = dict(self.params)
        init_keys = {"max_num_timeout"}
        init = {
            "folder": params["submitit_folder"],
            **{f"{self._EXECUTOR}_{k}": v for k, v in params.items() if k in init_keys},
        }
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, **init)
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(
            **{
                k if k in base else f"{self._EXECUTOR}_{k}": v
                for k, v in params.items()
                if k not in init_keys | {"submitit_folder"}
            }
        )
        return executor

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:

        executor = self._executor()
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        log.info(f"Submitit '{self._EXECUTOR}' sweep output dir : {sweep_dir}")
        params = []
        for i, overrides in enumerate(job_overrides):
            idx = initial_job_idx + i
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            params.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
        submitted = time.time()
        with _own_process_group(self._EXECUTOR == "local"):
            jobs = executor.map_array(self, *zip(*params))

        try:
            returns, failed = self._collect(job_overrides, jobs, initial_job_idx, sweep_dir, submitted)
        except BaseException:  # the sweep was stopped (SIGTERM, a time limit, Ctrl-C): so are its jobs
            _stop(jobs, sweep_dir, initial_job_idx)
            raise
        _report(failed, sweep_dir, len(jobs), submitted)
        return returns

    def _collect(self, job_overrides, jobs, initial_job_idx: int, sweep_dir: Path, submitted: float):
        """Each job's return, waited for in order; a job that failed comes back completed (so Hydra's
        sweeper does not stop at the first failure) and is listed in ``failed``."""
        import submitit

        returns, failed = [], []
        for i, (overrides, job) in enumerate(zip(job_overrides, jobs)):
            num = initial_job_idx + i
            try:
                ret = job.results()[0]
            except submitit.core.utils.UncompletedJobError as exc:  # killed, timed out, exited, out of memory
                ret = JobReturn(overrides=list(overrides), status=JobStatus.FAILED, _return_value=exc)
                _mark_killed(sweep_dir / str(num))
            else:
                # the job returned but an analyzer raised (its run ended FAILED): a failure like any other
                analyzers = _failed_analyzers(_job_dir(ret, sweep_dir, num), submitted)
                if ret.status == JobStatus.COMPLETED and analyzers:
                    ret = JobReturn(
                        overrides=ret.overrides,
                        status=JobStatus.FAILED,
                        _return_value=RuntimeError(
                            f"analyzer {', '.join(map(repr, analyzers))} FAILED (its MLflow run ended FAILED)"
                        ),
                        cfg=ret.cfg,
                        hydra_cfg=ret.hydra_cfg,
                        working_dir=ret.working_dir,
                        task_name=ret.task_name,
                    )
            if ret.status == JobStatus.FAILED:
                failed.append((num, job, ret))
                # completed, so Hydra's sweeper does not re-raise the first failure and stop there
                ret = JobReturn(
                    overrides=ret.overrides,
                    status=JobStatus.COMPLETED,
                    _return_value=None,
                    cfg=ret.cfg,
                    hydra_cfg=ret.hydra_cfg,
                    working_dir=ret.working_dir,
                    task_name=ret.task_name,
                )
            returns.append(ret)
        return returns, failed


@contextlib.contextmanager
def _own_process_group(local: bool):
    """Local jobs start in their own session: Ctrl-C in the terminal reaches this process alone, which
    stops the jobs itself (SIGTERM: each ends its run KILLED), instead of every job and controller
    printing its own KeyboardInterrupt traceback."""
    if not local:
        yield
        return
    import subprocess

    import submitit.local.local as submitit_local

    original = submitit_local.subprocess.Popen
    submitit_local.subprocess.Popen = functools.partial(subprocess.Popen, start_new_session=True)
    try:
        yield
    finally:
        submitit_local.subprocess.Popen = original


def _raise_killed(signum, frame):
    from modelxray.core.errors import JobKilled

    raise JobKilled(signal.Signals(signum).name)


STOP_WAIT_S = 15.0  # how long a stopped sweep waits for its jobs to end their runs KILLED themselves


def _stop(jobs, sweep_dir: Path, initial_job_idx: int) -> None:
    """Cancel the jobs still running (a local job gets SIGINT, a SLURM job scancel), give them
    ``STOP_WAIT_S`` to end their runs KILLED, and mark KILLED the runs of those that could not."""
    for job in jobs:
        try:
            if _done(job):
                continue
            process = getattr(job, "_process", None)
            if process is not None:  # a local job: its controller passes SIGTERM on to the job
                process.send_signal(signal.SIGTERM)
            else:
                job.cancel(check=False)
        except Exception:  # noqa: BLE001 - a job the scheduler no longer knows has ended
            pass
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline and not all(_done(j) for j in jobs):
        time.sleep(0.2)
    for i, job in enumerate(jobs):
        if not _done(job):
            _mark_killed(sweep_dir / str(initial_job_idx + i))


def _done(job) -> bool:
    try:
        return job.done()
    except Exception:  # noqa: BLE001 - the scheduler cannot say: treat as ended
        return True


def _job_dir(ret: JobReturn, sweep_dir: Path, num: int) -> Path:
    """The job's output folder (``hydra.sweep.subdir`` may differ from the job number)."""
    try:
        return Path(str(ret.hydra_cfg.hydra.runtime.output_dir))
    except Exception:  # noqa: BLE001 - no Hydra config came back: the default subdir
        return sweep_dir / str(num)


def _tracebacks(job_dir: Path, since: float) -> list[Path]:
    """The tracebacks this sweep wrote in ``job_dir/errors`` (older ones: an earlier sweep into the
    same folder)."""
    folder = job_dir / "errors"
    return (
        sorted(f for f in folder.glob("*_traceback.txt") if f.stat().st_mtime >= since - 1) if folder.is_dir() else []
    )


def _failed_analyzers(job_dir: Path, since: float) -> list[str]:
    return [f.name.removesuffix("_traceback.txt") for f in _tracebacks(job_dir, since) if f.name != "run_traceback.txt"]


def _report(failed: list, sweep_dir: Path, total: int, since: float) -> None:
    if not failed:
        return
    from modelxray.core.failures import report_failure

    lines = [f"modelxray: {len(failed)} of {total} jobs FAILED:"]
    for num, job, ret in failed:
        err = ret._return_value
        why = str(err).strip().splitlines()[0][:200] if err is not None else "failed"
        lines.append(f"  job #{num} ({job.job_id}, {job.state}): {why}")
        lines.append(f"    logs: {job.paths.stdout}")
        lines.append(f"          {job.paths.stderr}")
        for trace in _tracebacks(_job_dir(ret, sweep_dir, num), since):
            lines.append(f"    traceback: {trace}")
        report_failure(f"job #{num}")
    print("\n".join(lines), file=sys.stderr, flush=True)


def _mark_killed(job_dir: Path) -> None:
    """A job killed before it could end its MLflow run leaves it RUNNING: end it as KILLED."""
    try:
        from modelxray.tracking.mlflow_run import end_orphan_run

        end_orphan_run(job_dir)
    except Exception as exc:  # noqa: BLE001 - reporting the failure matters more than this tidy-up
        log.warning(f"could not mark the run of {job_dir} KILLED: {exc}")


class SlurmLauncher(_WaitForAll, stock.SlurmLauncher):
    pass


class LocalLauncher(_WaitForAll, stock.LocalLauncher):
    pass
