"""The command line: a thin Hydra layer over ``modelxray.app.run``.

Start-up stays light: this module imports Hydra and OmegaConf only, so ``--help``, ``--cfg job`` and
a bad value answer before torch, transformers or mlflow load (the app is imported when a job runs).

``--help`` is answered here rather than by Hydra's app help: that one lists the config groups by
asking the config loader for each group's options, and every such call deep-copies the whole
ConfigStore (the schema nodes included), about 125 times: seconds. Here the groups and their options
are read from the ``conf/`` directory, and the composed config is printed by Hydra's ``--cfg job``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

from omegaconf import DictConfig

from modelxray.config.overrides import FORCE_PREFIX, forced_overrides
from modelxray.core.errors import ConfigError
from modelxray.core.failures import collecting, report_failure

MULTIRUN_FLAGS = ("-m", "--multirun")
HELP_FLAGS = ("--help", "-h")
# conf/ folders that are no group to choose from: site files (conf/local) and generated nodes
UNLISTED_GROUPS = ("local", "schema")

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
    from modelxray.app import JobKilled

    raise JobKilled(f"signal {signum}")


def task(cfg: DictConfig) -> dict[str, float]:
    """Hydra task function: one job. Config errors end the process with one line and exit code 2;
    SIGTERM (scancel, a SLURM timeout) ends the run KILLED rather than leaving it RUNNING."""
    from modelxray.config.components import validate_config

    try:
        components = validate_config(cfg)  # every check that needs no model, before the heavy imports
        components.tracker.check()  # the store, once: a dead server fails now, not after minutes of retries
        from modelxray import app

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _raise_killed)
        job = job_info()
        _save_overrides_as_typed(job.output_dir, job.overrides)
        outcome = app.run(cfg, job)
    except ConfigError as exc:
        print(f"modelxray: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
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


def normalize_argv(argv: list[str]) -> list[str]:
    """Hydra's parser wants ``-m`` before the overrides; accept it anywhere on the line."""
    flags = [a for a in argv if a in MULTIRUN_FLAGS]
    return flags[:1] + [a for a in argv if a not in MULTIRUN_FLAGS]


def config_groups(conf: Path) -> dict[str, list[str]]:
    """The config groups under ``conf`` (``analyzer``, ``hydra/launcher`` ...) with their options,
    read from the directory: no config is loaded. ``local/`` and ``schema/`` are left out."""
    groups: dict[str, list[str]] = {}
    for dirpath, dirnames, filenames in os.walk(conf):
        rel = Path(dirpath).relative_to(conf).as_posix()
        dirnames[:] = [
            d for d in dirnames if not d.startswith((".", "_")) and not (rel == "." and d in UNLISTED_GROUPS)
        ]
        options = sorted(f[: -len(".yaml")] for f in filenames if f.endswith(".yaml"))
        if rel != "." and options:
            groups[rel] = options
    return groups


def help_text(conf: Path) -> str:
    """``--help`` up to the composed config: usage, examples, every group with its options."""
    groups = config_groups(conf)
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


def _empty_sweep(args: list[str]) -> str | None:
    """A swept key with no value (``seed=range(0,0)``) would launch no job and end as an empty,
    successful sweep: the one-line error instead, or None."""
    if not any(a in MULTIRUN_FLAGS for a in args):
        return None
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides([a for a in args if not a.startswith("-")])
    except Exception:  # noqa: BLE001 - Hydra reports a malformed override itself
        return None
    for override in parsed:
        if override.is_sweep_override() and not list(override.sweep_iterator()):
            value = override.input_line.split("=", 1)[-1] if override.input_line else ""
            return f"{override.key_or_group}: the sweep {value} has no value, so no job would run; give at least one"
    return None


def main(argv: list[str] | None = None) -> int:
    """``python run.py [overrides] [-m]``: run the jobs, return the exit code (1 if any job failed)."""
    import hydra

    from modelxray.core.paths import conf_dir
    from modelxray.core.schema import register_schema

    register_schema()
    args = forced_overrides(normalize_argv(sys.argv[1:] if argv is None else list(argv)), conf_dir())
    show_help = any(a in HELP_FLAGS for a in args)
    if show_help:  # Hydra's --help composes in run mode too, so -m goes (--cfg refuses it)
        print(help_text(conf_dir()))
        args = [a for a in args if a not in HELP_FLAGS + MULTIRUN_FLAGS] + ["--cfg", "job"]
    empty = _empty_sweep(args)
    if empty:
        print(f"modelxray: error: {empty}", file=sys.stderr)
        return 2
    saved = sys.argv
    sys.argv = [saved[0] if saved else "run.py", *args]
    try:
        with collecting() as failures:
            hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")(task)()
    finally:
        sys.argv = saved
    if show_help:
        print(f"\n{HELP_FOOTER}")
    return 1 if failures else 0
