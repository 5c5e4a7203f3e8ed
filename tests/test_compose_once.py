"""A run's config is composed once (Hydra composes it twice: once to read ``hydra.mode``), and the
config the job sees is the one Hydra's own second composition gives; sweeps and a config that sets
``hydra.mode: MULTIRUN`` still go Hydra's way. Schema nodes are built only when a config names them."""

from pathlib import Path

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl

from modelxray.cli import main


@pytest.fixture
def compositions(monkeypatch):
    """The run mode of every composition Hydra makes while the test runs."""
    calls = []
    original = ConfigLoaderImpl.load_configuration

    def counting(self, *args, **kwargs):
        calls.append(str(kwargs.get("run_mode")))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counting)
    return calls


def test_a_bad_value_is_found_after_one_composition(tmp_path, monkeypatch, capsys, compositions):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(["debug=tiny", "dataset.seq_len=-1", f"hydra.run.dir={tmp_path / 'run'}"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip() == "modelxray: error: dataset.seq_len: must be positive, got -1"
    assert compositions == ["RunMode.RUN"]


def test_the_job_sees_the_config_hydra_would_give(tmp_path, monkeypatch, compositions):
    """The composed config records ``hydra.mode=RUN`` among Hydra's overrides and runs in run mode,
    as Hydra's own second composition would."""
    import yaml

    monkeypatch.chdir(tmp_path)
    seen = {}
    import modelxray.cli as cli

    def task(cfg):
        from hydra.core.hydra_config import HydraConfig

        seen["mode"] = str(HydraConfig.get().mode)
        seen["hydra_overrides"] = list(HydraConfig.get().overrides.hydra)
        seen["task_overrides"] = list(HydraConfig.get().overrides.task)
        return {}

    monkeypatch.setattr(cli, "task", task)
    run = tmp_path / "run"
    assert main(["debug=tiny", "quant=int8", f"hydra.run.dir={run}"]) == 0
    assert compositions == ["RunMode.RUN"]
    assert seen["mode"] == "RunMode.RUN"
    assert "hydra.mode=RUN" in seen["hydra_overrides"]
    assert "++quant=int8" in seen["task_overrides"] or "quant=int8" in seen["task_overrides"]
    saved = yaml.safe_load((run / ".hydra" / "hydra.yaml").read_text())
    assert saved["hydra"]["mode"] == "RUN" and "hydra.mode=RUN" in saved["hydra"]["overrides"]["hydra"]


def test_a_config_that_asks_for_multirun_still_sweeps(tmp_path, monkeypatch):
    """``hydra.mode: MULTIRUN`` in a config file, with sweep values: Hydra's own mode reading."""
    import modelxray.cli as cli

    monkeypatch.chdir(tmp_path)
    extra = tmp_path / "extra"
    (extra / "experiment").mkdir(parents=True)
    (extra / "experiment" / "sweep_me.yaml").write_text(
        "# @package _global_\nhydra:\n  mode: MULTIRUN\n  sweeper:\n    params:\n      seed: 1,2\n"
    )
    jobs = []
    monkeypatch.setattr(cli, "task", lambda cfg: jobs.append(cfg.seed) or {})
    code = main(["--config-dir", str(extra), "experiment=sweep_me", "debug=tiny", f"hydra.sweep.dir={tmp_path / 's'}"])
    assert code == 0
    assert sorted(jobs) == [1, 2]


def test_schema_nodes_are_built_when_named():
    """Registering the schema imports no config module; loading a node builds it from its class."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from modelxray.core.schema import register_schema\n"
        "register_schema()\n"
        "assert 'modelxray.analyzers.performance' not in sys.modules\n"
        "from hydra.core.config_store import ConfigStore\n"
        "node = ConfigStore.instance().load('schema/analyzer/performance.yaml').node\n"
        "assert node._target_ == 'modelxray.analyzers.performance.PerformanceAnalyzer', node._target_\n"
        "assert 'modelxray.analyzers.performance' in sys.modules\n"
    )
    src = Path(__file__).resolve().parents[1] / "src"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env={"PYTHONPATH": str(src)})
    assert proc.returncode == 0, proc.stderr
