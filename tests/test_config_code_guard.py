"""Code a config names is checked before anything is built, and names that become paths stay names.

Hydra builds ``hydra.callbacks``, ``hydra.launcher`` and ``hydra.sweeper`` itself, and Python's logging
builds the classes of ``hydra.job_logging`` / ``hydra.hydra_logging``, before modelxray's own checks
run; any config file can set them. ``config.code_guard`` checks every config Hydra composes first.
"""

from __future__ import annotations

import os
import pickle

import pytest
from omegaconf import OmegaConf

from conftest import run_cli
from modelxray.config.code_guard import ENV_VAR, _class_of_package, check_code, guarded
from modelxray.config.names import check_names
from modelxray.core.errors import ConfigError

PICKLE = "+hydra.callbacks.evil={{_target_: torch.load, f: {f}, weights_only: false}}"


def _compose(overrides: list[str]):
    """The config ``python run.py OVERRIDES`` composes, its ``hydra`` node included."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from modelxray.core.paths import conf_dir
    from modelxray.core.schema import register_schema

    register_schema()
    if GlobalHydra.instance().is_initialized():
        return compose(config_name="config", overrides=overrides, return_hydra_config=True)
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose(config_name="config", overrides=overrides, return_hydra_config=True)


def _refused(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as info:
        check_code(_compose(overrides))
    return str(info.value)


def _preset(tmp_path, text: str) -> list[str]:
    """Overrides that read ``experiment=preset`` from a config folder of the user's (``--config-dir``)."""
    (tmp_path / "experiment").mkdir(exist_ok=True)
    (tmp_path / "experiment" / "preset.yaml").write_text("# @package _global_\n" + text)
    return [f"hydra.searchpath=[file://{tmp_path}]", "experiment=preset"]


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["hydra/launcher=slurm"],
        ["hydra/launcher=local_jobs"],
        ["hydra/job_logging=stdout", "hydra/hydra_logging=hydra_debug"],
        ["hydra/job_logging=disabled", "hydra/hydra_logging=none"],
        ["+hydra.callbacks.log={_target_: hydra.experimental.callbacks.LogJobReturnCallback}"],
    ],
)
def test_what_modelxray_and_hydra_ship_passes(overrides):
    cfg = _compose(overrides)
    check_code(cfg)
    check_names(cfg)


@pytest.mark.parametrize(
    "override, key, name",
    [
        (PICKLE.format(f="evil.pt"), "hydra.callbacks.evil._target_", "torch.load"),
        ("+hydra.callbacks.log={_target_: logging.FileHandler, filename: /tmp/x}", "hydra.callbacks.log._target_", ""),
        # a prefix alone is not enough: a module's imports are its attributes
        ("+hydra.callbacks.x={_target_: modelxray.cli.os.system, _args_: [id]}", "hydra.callbacks.x._target_", ""),
        # Hydra builds a callback's nested _target_ first
        (
            "+hydra.callbacks.sweep_setup.x={_target_: builtins.open, file: x, mode: w}",
            "hydra.callbacks.sweep_setup.x._target_",
            "",
        ),
        ("hydra.launcher._target_=os.system", "hydra.launcher._target_", ""),
        ("hydra.sweeper._target_=subprocess.Popen", "hydra.sweeper._target_", ""),
        ("+dataset.extra={_target_: builtins.exec}", "dataset.extra._target_", ""),  # anywhere else in the config
        ("+hydra.callbacks.x={_target_: ${oc.env:HOME}}", "hydra.callbacks.x._target_", ""),
    ],
)
def test_code_a_config_names_is_refused_by_its_key(override, key, name):
    msg = _refused([override])
    assert msg.startswith(f"{key}: "), msg
    assert name in msg and (ENV_VAR in msg or "interpolation" in msg)


@pytest.mark.parametrize(
    "text, key",
    [
        ("hydra:\n  callbacks:\n    evil: {_target_: torch.load, f: x.pt}\n", "hydra.callbacks.evil._target_"),
        (
            'hydra:\n  job_logging:\n    handlers:\n      x: {"()": os.system, command: id}\n',
            "hydra.job_logging.handlers.x.()",
        ),
        (
            "hydra:\n  job_logging:\n    handlers:\n      x: {class: evil.Handler}\n",
            "hydra.job_logging.handlers.x.class",
        ),
        (
            "hydra:\n  hydra_logging:\n    formatters:\n      f: {class: evil.Formatter}\n",
            "hydra.hydra_logging.formatters.f.class",
        ),
        (
            "hydra:\n  job_logging:\n    handlers:\n      console: {stream: 'ext://os.environ'}\n",
            "hydra.job_logging.handlers.console.stream",
        ),
        (
            "hydra:\n  job_logging:\n    handlers:\n      file: {filename: /tmp/anywhere.log}\n",
            "hydra.job_logging.handlers.file.filename",
        ),
        (
            "hydra:\n  job_logging:\n    handlers:\n      file: {filename: '${hydra.runtime.output_dir}/../x.log'}\n",
            "hydra.job_logging.handlers.file.filename",
        ),
        (
            "hydra:\n  job_logging:\n    handlers:\n      file: {'.': {baseFilename: /tmp/anywhere.log}}\n",
            "hydra.job_logging.handlers.file..",
        ),
        (
            "hydra:\n  job_logging:\n    formatters:\n      f: {defaults: {x: [ext://os.system]}}\n",
            "hydra.job_logging.formatters.f.defaults.x[0]",
        ),
        (f"hydra:\n  job:\n    env_set:\n      {ENV_VAR}: torch.load\n", f"hydra.job.env_set.{ENV_VAR}"),
    ],
)
def test_a_config_file_is_checked_like_the_command_line(tmp_path, text, key):
    assert _refused(_preset(tmp_path, text)).startswith(f"{key}: ")


def test_targets_with_checks_of_their_own_are_left_to_them():
    """A group's own _target_ is checked as a modelxray component (yours too, docs/new_analyzer.md),
    model.architecture as model code (docs/model_kinds.md): both before anything is built."""
    check_code(_compose(["+analyzer.x._target_=weight_norms.WeightNormsAnalyzer", "quant._target_=mine.Quant"]))
    check_code(_compose(["model=file", "model.architecture={_target_: mypkg.Net, _args_: [{_target_: x.Y}]}"]))


def test_a_class_counts_where_its_package_defines_it():
    assert _class_of_package("modelxray.sweep.SweepSetup", "modelxray")
    assert _class_of_package("modelxray.ConfigError", "modelxray")  # re-exported from modelxray.core.errors
    assert _class_of_package("modelxray.analyzers.performance.PerformanceAnalyzer", "modelxray")
    assert _class_of_package(
        "hydra_plugins.modelxray_launcher.launcher.LocalLauncher", "hydra_plugins.modelxray_launcher"
    )
    assert not _class_of_package("modelxray.cli.os", "modelxray")  # an imported module
    assert not _class_of_package("modelxray.cli.Path", "modelxray")  # an imported class of another package
    assert not _class_of_package("modelxray.analyze", "modelxray")  # reached through a module __getattr__
    assert not _class_of_package("modelxray.core.paths.conf_dir", "modelxray")  # a function


def test_the_user_extends_the_list_deliberately_by_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "torch.load")
    check_code(_compose([PICKLE.format(f="evil.pt")]))
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "notify.py").write_text("import os\n\nclass Notify:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(ENV_VAR, "mypkg.*")
    check_code(_compose(["+hydra.callbacks.n={_target_: mypkg.notify.Notify}"]))
    assert _refused(["+hydra.callbacks.n={_target_: mypkg.notify.os.system}"]).startswith("hydra.callbacks.n._target_")
    monkeypatch.delenv(ENV_VAR)
    assert _refused(["+hydra.callbacks.n={_target_: mypkg.notify.Notify}"]).startswith("hydra.callbacks.n._target_")


def test_guarded_checks_every_config_hydra_composes():
    """The guard wraps the one method Hydra composes every config with (the run's, a sweep's, each
    job's, --cfg's), and puts it back after."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    original = ConfigLoaderImpl.load_configuration
    with guarded():
        with pytest.raises(ConfigError, match=r"^hydra\.callbacks\.evil\._target_: 'torch\.load'"):
            _compose([PICKLE.format(f="evil.pt")])
        with pytest.raises(ConfigError, match=r"^hydra\.job\.name: "):
            _compose(["hydra.job.name=../x"])
        _compose([])
    assert ConfigLoaderImpl.load_configuration is original
    _compose([PICKLE.format(f="evil.pt")])  # outside the command line, nothing builds Hydra's callbacks


@pytest.mark.parametrize(
    "override, key",
    [
        ("hydra.job.name=../../x", "hydra.job.name"),
        ("hydra.job.name=logs/x", "hydra.job.name"),
        ("hydra.output_subdir=../x", "hydra.output_subdir"),
        ("hydra.sweep.subdir=/tmp/x", "hydra.sweep.subdir"),
        ("++tracker.tags={../x: 1}", "tracker.tags.../x"),
        ("++tracker.tags={/x: 1}", "tracker.tags./x"),
        ("++tracker.tags={a//b: 1}", "tracker.tags.a//b"),
        ("++tracker.tags={a$b: 1}", "tracker.tags.a$b"),
    ],
)
def test_names_that_become_paths_are_refused_by_their_key(override, key):
    with pytest.raises(ConfigError) as info:
        check_names(_compose([override]))
    assert str(info.value).startswith(f"{key}: ")


def test_names_that_stay_names_pass():
    check_names(_compose(["++tracker.tags={team/owner: me, run-kind.v1: a.b-c}", "hydra.output_subdir=null"]))
    check_names(_compose(["tracker.run_name=int4 w/ gptq"]))  # a run name is a tag's value in MLflow, no path
    with pytest.raises(ConfigError, match=r"^analyzer\.\.\./x: "):
        check_names(OmegaConf.create({"analyzer": {"../x": {}}}))  # names errors/<name>_traceback.txt


def test_a_tag_name_mlflow_refuses_is_found_before_the_model_loads():
    from modelxray.api import compose
    from modelxray.config.components import build_components

    with pytest.raises(ConfigError, match=r"^tracker\.tags\.\.\./x: '\.\./x' is no tag name MLflow takes"):
        build_components(compose(["model=tiny_gpt2", "tracker=mlflow", "tracker.tags={../x: 1}"]))


def test_a_key_hydra_cannot_read_is_said_to_be_the_key():
    from modelxray.config.overrides import check_overrides
    from modelxray.core.paths import conf_dir

    with pytest.raises(ConfigError, match=r"^tracker\.tags\.\.\./x: this key cannot be read"):
        check_overrides(["+tracker.tags.../x=1"], [conf_dir()], multirun=False)


class _Marks:
    """Unpickled, it creates a file: proof that the pickle ran."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (os.mknod, (self.path,))


def test_code_in_hydra_keys_is_one_line_before_anything_is_built(tmp_path):
    """End to end: Hydra would build the callback before the task runs; the pickle never runs, the
    FileHandler a config file names never creates its file, and no run folder is left."""
    evil, marker = tmp_path / "evil.pt", tmp_path / "PICKLE_RAN"
    evil.write_bytes(pickle.dumps(_Marks(str(marker))))
    proc = run_cli(["debug=tiny", "tracker=none", PICKLE.format(f=evil)], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        "modelxray: error: hydra.callbacks.evil._target_: 'torch.load' is code a config may not name (it would be "
        "imported and called); allowed: modelxray's classes, Hydra's launchers, sweepers and callbacks; to run it "
        f"anyway, allow it deliberately: {ENV_VAR}=torch.load python run.py ... (docs/reliability.md)"
    ]
    made = tmp_path / "made.log"
    (tmp_path / "mine" / "experiment").mkdir(parents=True)
    (tmp_path / "mine" / "experiment" / "log.yaml").write_text(
        f"# @package _global_\nhydra:\n  callbacks:\n    log: {{_target_: logging.FileHandler, filename: {made}}}\n"
    )
    proc = run_cli(["--config-dir", "mine", "experiment=log", "debug=tiny", "tracker=none"], tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-2000:]
    assert proc.stderr.startswith("modelxray: error: hydra.callbacks.log._target_: 'logging.FileHandler' is code")
    assert not marker.exists() and not made.exists()
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "mlflow.db").exists()


def test_a_job_name_with_dots_is_one_line_and_writes_no_log_above_the_run_folder(tmp_path):
    run_dir = tmp_path / "a" / "b" / "run"
    proc = run_cli(["debug=tiny", "tracker=none", "hydra.job.name=../../x", f"hydra.run.dir={run_dir}"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        "modelxray: error: hydra.job.name: '../../x' holds a path separator or '..' (it becomes the job log's "
        "file name, <run folder>/<name>.log); use a plain name"
    ]
    assert not list(tmp_path.rglob("x.log")) and not run_dir.exists()
