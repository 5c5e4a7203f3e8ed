"""The command line: a thin Hydra layer over ``modelxray.app.run``.

Start-up stays light: this module imports Hydra and OmegaConf only, so ``--help``, ``--cfg job`` and
a bad value answer before torch, transformers or mlflow load (the app is imported when a job runs).

``--help`` is answered here rather than by Hydra's app help: that one lists the config groups by
asking the config loader for each group's options, and every such call deep-copies the whole
ConfigStore (the schema nodes included), about 125 times: seconds. Here the groups and their options
are read from the ``conf/`` directory, and the composed config is printed by Hydra's ``--cfg job``.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
from pathlib import Path
from typing import NoReturn

from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

import modelxray.core.cpus  # noqa: F401 - first: it notes how busy the machine is as the process starts
from modelxray.config.overrides import FORCE_PREFIX, check_overrides, forced_overrides, group_options
from modelxray.core.errors import ConfigError, JobKilled, OutputError
from modelxray.core.failures import collecting, collecting_here, report_failure
from modelxray.tracking.redact import install_log_redaction, redact_text

MULTIRUN_FLAGS = ("-m", "--multirun")
# what the operating system says of a path the run cannot write: no such folder, not a folder, no
# permission, a read-only file system, a full disk or quota
UNWRITABLE = (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT)
HELP_FLAGS = ("--help", "-h")
CONFIG_DIR_FLAGS = ("--config-dir", "-cd")
INFO_FLAGS, INFO_TOPICS = (
    ("--info", "-i"),
    [[t] for t in ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")],
)
# Hydra's flags that take the next argument as their value
VALUE_FLAGS = ("--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn", *CONFIG_DIR_FLAGS)

HELP_HEADER = """\
modelxray: put a PyTorch / Hugging Face model under analysis. One run = one model, one dataset,
one quantization, one or more analyzers; every setting is a config key with a default.

Usage: python run.py [group=option ...] [key=value ...] [-m] [--cfg job] [--hydra-help]

Examples:
  python run.py                                               # embedded default model, offline
  python run.py debug=tiny analyzer=[performance,robustness]  # a run in seconds, untracked
  python run.py -m experiment=quant_comparison                # a ready-made study
  python run.py model=tiny_gpt2 dataset.max_tokens=2048       # any key=value
  python run.py quant=int4,int8 -m                            # sweep: one job per value
  python run.py model=tiny_gpt2 --cfg job                     # print the composed config, run nothing
  python run.py hydra.verbose=true                            # debug logging
"""

HELP_FOOTER = """\
Every key with its default and meaning: docs/config_reference.md
Hydra's own flags and config groups: python run.py --hydra-help"""


def job_info():
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from modelxray.app import JobInfo, choices_of

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    return JobInfo(
        output_dir=hc.runtime.output_dir,
        choices=choices_of(hc),
        overrides=[o.removeprefix(FORCE_PREFIX) for o in hc.overrides.task],  # as typed: see forced_overrides
        sweep_dir=hc.sweep.dir if multirun else None,
        job_num=hc.job.num if multirun else None,
    )


def _save_overrides_as_typed(output_dir: str, overrides: list[str]) -> None:
    """Hydra saved the overrides it was handed (``++key=value``, see ``forced_overrides``) in
    ``.hydra/overrides.yaml``; the file shows them as the user typed them, which run the same job."""
    from hydra.core.hydra_config import HydraConfig

    subdir = HydraConfig.get().output_subdir
    path = Path(output_dir) / subdir / "overrides.yaml" if subdir else None
    if path is not None and path.exists():
        import yaml

        path.write_text(yaml.safe_dump(list(overrides), default_flow_style=False, sort_keys=False))


def _raise_killed(signum, frame):
    raise JobKilled(signal.Signals(signum).name)


def _stop_on_sigterm() -> None:
    """SIGTERM (scancel, a time limit, a shutdown) raises JobKilled: the run ends KILLED, a sweep's
    parent run too, and the process exits with one line instead of dying where it stood."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_killed)


def _drop_unused_output_dir() -> None:
    """A bad input stops the job before any work: the folder Hydra made for it (its ``.hydra/`` and
    ``run.log`` only) goes, and the date folders above it when that leaves them empty."""
    import shutil

    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    try:
        hydra_cfg = HydraConfig.get()
    except ValueError:  # not under Hydra
        return
    out = Path(hydra_cfg.runtime.output_dir)
    if not out.is_dir() or any(p.name not in (".hydra", "run.log") for p in out.iterdir()):
        return
    shutil.rmtree(out, ignore_errors=True)
    if hydra_cfg.mode == RunMode.RUN and out.parent.parent.name == "outputs":  # the default outputs/<date>/<time>
        for parent in (out.parent, out.parent.parent):
            if parent.is_dir() and not any(parent.iterdir()):
                parent.rmdir()


def task(cfg: DictConfig) -> dict[str, float]:
    """Hydra task function: one job. Config errors end the process with one line and exit code 2."""
    from modelxray.config.components import validate_config
    from modelxray.core.lazy import collector_paused

    install_log_redaction()  # again: a job a launcher runs in its own process never passed through main
    try:
        with collector_paused():  # the checks import torch, then the run's modules load
            components = validate_config(cfg)  # every check that needs no model, before the heavy imports
            components.tracker.check()  # the store, once: a dead server fails now, not after minutes of retries
            from modelxray import app

        _stop_on_sigterm()  # again: a job a launcher runs in its own process never passed through main
        job = job_info()
        _save_overrides_as_typed(job.output_dir, job.overrides)
        outcome = app.run(cfg, job)
    except (ConfigError, OmegaConfBaseException) as exc:  # an interpolation that does not resolve, too
        say_error(exc)
        _drop_unused_output_dir()
        if not _sweep_job_here():
            raise SystemExit(2) from None
        _sweep_goes_on(exc)  # the sweep's other jobs run; the comparison lists this one
        return {}
    except OutputError as exc:  # the run ended FAILED; the files written before it are kept
        say_error(exc)
        report_failure(str(exc.filename))
        return {}
    except Exception as exc:
        if not _sweep_job_here():
            raise
        say_error(exc)  # its traceback is in the run's errors/run_traceback.txt and in the store
        _sweep_goes_on(exc)
        return {}
    if outcome.skipped:
        print(f"modelxray: {outcome.tracking}")
        return outcome.metrics
    print(f"modelxray: report  {outcome.output_dir}/summary_report.md")
    print(f"modelxray: tracking {outcome.tracking}")
    if outcome.view and job.sweep_dir is None:  # a sweep prints its link once, at its end
        print(f"modelxray: view     {outcome.view}")
    for name in outcome.failed:
        print(
            f"modelxray: analyzer {name!r} FAILED: see {outcome.output_dir}/errors/{name}_traceback.txt",
            file=sys.stderr,
        )
        report_failure(f"{outcome.output_dir}:{name}")
    return outcome.metrics


def _sweep_job_here() -> bool:
    """A job of a sweep whose jobs run one after another in this process: its failure is recorded and
    the next job runs (a launcher that starts jobs elsewhere sees a failed job by its exit)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    try:
        return HydraConfig.get().mode == RunMode.MULTIRUN and collecting_here()
    except ValueError:  # not under Hydra
        return False


def _sweep_goes_on(exc: BaseException) -> None:
    """Record a sweep job's failure as ``job #2 (quant=int4 model=...): <the error's first line>`` (the
    list the sweep's comparison shows) and say that the sweep goes on."""
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    overrides = redact_text(" ".join(o.removeprefix(FORCE_PREFIX) for o in hc.overrides.task))
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    report_failure(f"job #{hc.job.num} ({overrides}): {first[:300]}")
    print(f"modelxray: job #{hc.job.num} ({overrides}) FAILED; the sweep goes on with its other jobs", file=sys.stderr)


def unwritable(exc: OSError) -> str:
    """One line for a path the run cannot use: a run folder under /proc or under a file, a read-only
    or full disk (Hydra makes the run folder before any check of ours could), a file gone."""
    where = exc.filename or "a file of the run"
    if exc.errno == errno.ENOSPC or exc.errno == errno.EDQUOT:
        return f"cannot write {where}: {exc.strerror or exc}; free some space or write elsewhere (hydra.run.dir=...)"
    return (
        f"cannot use {where}: {exc.strerror or exc}; check the path, or choose a folder you can write "
        "(hydra.run.dir=..., hydra.sweep.dir=..., tracker.uri=...)"
    )


def normalize_argv(argv: list[str]) -> list[str]:
    """Hydra's parser wants its flags (``-m``, ``--config-dir DIR`` ...) before the overrides, which
    must stand together; accept flags anywhere on the line. ``-m`` counts once."""
    flags, overrides, i = [], [], 0
    while i < len(argv):
        arg = argv[i]
        if arg in MULTIRUN_FLAGS:
            flags += [] if any(f in MULTIRUN_FLAGS for f in flags) else [arg]
        elif arg in VALUE_FLAGS and i + 1 < len(argv) or arg in INFO_FLAGS and argv[i + 1 : i + 2] in INFO_TOPICS:
            flags += [arg, argv[i + 1]]
            i += 1
        elif arg.startswith("-"):
            flags.append(arg)
        else:
            overrides.append(arg)
        i += 1
    return flags + overrides


def help_text(conf: Path) -> str:
    """``--help`` up to the composed config: usage, examples, every group with its options."""
    groups = group_options(conf)
    # the app's groups, then the project's options of Hydra's groups (hydra/launcher=slurm ...)
    names = sorted(groups, key=lambda g: (g.startswith("hydra/"), g))
    listing = "\n".join(f"{g}: {', '.join(groups[g])}" for g in names)
    return (
        f"{HELP_HEADER}\n"
        "== Configuration groups ==\n"
        "Compose your configuration from those groups (group=option)\n\n"
        f"{listing}\n\n"
        "== Config ==\n"
        "Override anything in the config (foo.bar=value)\n"
    )


def say_error(exc: BaseException) -> None:
    """``modelxray: error: <key>: <message>`` on one line: a message of several lines (Hydra's, an
    import error's) keeps its first two; an OmegaConf error is prefixed with the key it concerns."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
    text = lines[0]
    if len(lines) > 1:  # a sentence goes on after a space, anything else after a semicolon
        text += (" " if text[-1] in ".:;" else "; ") + lines[1]
    key = getattr(exc, "full_key", None)
    if isinstance(exc, OmegaConfBaseException) and key and not text.startswith(f"{key}:"):
        text = f"{key}: {text}"
    print(f"modelxray: error: {redact_text(text)}", file=sys.stderr)


def _config_dirs(args: list[str]) -> list[Path]:
    """The folders given with ``--config-dir DIR`` (or ``-cd DIR``, ``--config-dir=DIR``)."""
    dirs = [Path(v) for flag, v in zip(args, args[1:]) if flag in CONFIG_DIR_FLAGS]
    return dirs + [Path(a.split("=", 1)[1]) for a in args if a.startswith("--config-dir=")]


def run() -> NoReturn:
    """The ``python run.py`` / ``modelxray`` entry point: :func:`main`, then :func:`exit_promptly`."""
    exit_promptly(main())


def exit_promptly(code: int | None) -> NoReturn:
    """End the process with ``code`` once its work is done, without tearing down every module.

    Why: Python's finalization frees each of the millions of objects torch, transformers, MLflow,
    scikit-learn and matplotlib created, one module after another: 1-3 s after a run has finished,
    on every run (0.5 s for ``import torch`` alone). Everything a normal exit does that matters
    still happens here: the ``atexit`` handlers run (logging's flush, MLflow's, coverage's), then
    standard output and error are flushed. Files the run wrote were closed as it wrote them. Where
    another non-daemon thread is still running, the process exits the normal way, which waits for it."""
    import atexit

    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can reach it
            pass
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


def main(argv: list[str] | None = None) -> int:
    """``python run.py [overrides] [-m]``: run the jobs, return the exit code (1 if any job failed)."""
    import hydra
    from hydra.errors import HydraException

    from modelxray.config.code_guard import guarded
    from modelxray.config.compose_once import composing_once
    from modelxray.config.early_values import check_values_early
    from modelxray.core.paths import conf_dir
    from modelxray.core.schema import register_schema

    register_schema()
    install_log_redaction()  # Hydra's lines name each job's overrides: secrets are masked in every log line
    typed = normalize_argv(sys.argv[1:] if argv is None else list(argv))
    try:
        check_overrides(typed, [conf_dir(), *_config_dirs(typed)], multirun=any(a in MULTIRUN_FLAGS for a in typed))
        check_values_early(typed, conf_dir())  # a value the command line sets, where no composing is needed to check it
    except ConfigError as exc:
        say_error(exc)
        return 2
    args = forced_overrides(typed, conf_dir())
    show_help = any(a in HELP_FLAGS for a in args)
    if show_help:  # Hydra's --help composes in run mode too, so -m goes (--cfg refuses it)
        print(help_text(conf_dir()))
        args = [a for a in args if a not in HELP_FLAGS + MULTIRUN_FLAGS] + ["--cfg", "job"]
    saved = sys.argv
    sys.argv = [saved[0] if saved else "run.py", *args]
    _stop_on_sigterm()
    full_error = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra's own errors reach the handler below, not its printer
    try:
        # code a config names is checked before Hydra builds it; a run's config is composed once
        with collecting() as failures, guarded(), composing_once():
            hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")(task)()
    except (HydraException, OmegaConfBaseException, ConfigError) as exc:  # composing failed, or the guard refused
        say_error(exc)
        return 2
    except OSError as exc:
        if exc.errno not in UNWRITABLE:
            raise
        print(f"modelxray: error: {unwritable(exc)}", file=sys.stderr)  # a run that started has its traceback
        return 2
    except (JobKilled, KeyboardInterrupt) as exc:
        how = f"by {exc}" if isinstance(exc, JobKilled) else "by Ctrl-C"
        print(
            f"modelxray: stopped {how}: what finished is kept; runtime.skip_finished=true resumes the rest",
            file=sys.stderr,
        )
        return 143 if isinstance(exc, JobKilled) else 130  # 128 + the signal, as a shell reports it
    finally:
        sys.argv = saved
        if full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = full_error
    if show_help:
        print(f"\n{HELP_FOOTER}")
    return 1 if failures else 0
