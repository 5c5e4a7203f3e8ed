"""Shared fixtures: offline hub, one MLflow SQLite store per session, small-model overrides."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may reach a model hub from the tests
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
if os.environ.get("PYTEST_XDIST_WORKER"):  # one of two workers on two cores: one thread each, its runs too
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]

# The files that take longest (seconds of one worker, measured with --durations), run first:
# pytest-xdist hands whole files to its two workers in collection order (--no-loadscope-reorder in
# pyproject.toml), so the suite ends on short files and both workers finish together. Left to
# xdist's own order (most tests first), these few-test files came last and one worker ran them
# alone for minutes. A file not listed keeps its place after these.
SLOWEST_FILES = (
    "test_vision_kinds.py",  # 102
    "test_task_kinds.py",  # 68
    "test_library_quantizers.py",  # 58
    "test_doc_commands.py",  # 56
    "test_bad_input.py",  # 49
    "test_block_stream.py",  # 42
    "test_startup_imports.py",  # 35
    "test_mlflow_ui.py",  # 34
    "test_lm_eval.py",  # 33
    "test_reference_model.py",  # 32
    "test_configs.py",  # 31
    "test_stop.py",  # 30
    "test_generic_kind.py",  # 27
    "test_dying_server.py",  # 26
    "test_lm_eval_ranking.py",  # 25
    "test_loader_shapes.py",  # 24
)


@pytest.fixture(autouse=True)
def _logging_as_it_was():
    """A run Hydra starts in-process (``cli.main``) sets up logging for it (the root logger at INFO,
    a console and a file handler) and leaves it so, as it may in a process that ends with the run; after
    each test the root logger's level and handlers go back, so the next test sees a fresh process's."""
    import logging

    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    root.setLevel(level)
    for handler in list(root.handlers):
        if handler not in handlers and not type(handler).__module__.startswith("_pytest"):
            root.removeHandler(handler)
            handler.close()


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's own order kept


def load_script(name: str):
    """``scripts/<name>.py`` as a module (the scripts are not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tracking_uri(tmp_path_factory) -> str:
    db = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    return f"sqlite:///{db}"


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("cache"))


@pytest.fixture
def tiny(tracking_uri, cache_dir, request) -> list[str]:
    """Overrides for a fast run on the tiny GPT-2, tracked in the session store under the test's name."""
    return [
        "debug=tiny",  # tiny GPT-2, 1,024 tokens in 128-token windows, no progress bars
        f"dataset.cache_dir={cache_dir}",
        "analyzer.performance.iters=2",
        "analyzer.performance.layer_timing_iters=1",
        "tracker=mlflow",
        f"tracker.uri={tracking_uri}",
        f"tracker.experiment={request.node.name}",
    ]


# A sweep's job in about a second: one-layer tiny GPT-2, 512 tokens, one timing of batch 1, no dashboard
TINY_JOB = [
    "debug=tiny",
    "model.n_layer=1",
    "dataset.max_tokens=512",
    "dataset.seq_len=64",
    "analyzer.performance.iters=1",
    "analyzer.performance.layer_timing_iters=1",
    "analyzer.performance.speed_batch_sizes=[1]",
    "report.dashboard=false",
]


def run_cli(args: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python run.py ARGS`` from ``cwd`` (outputs and mlflow.db land there)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HYDRA_FULL_ERROR": "0"}
    return subprocess.run(
        [sys.executable, str(REPO / "run.py"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def cli_results(args: list[str], cwd: Path, timeout: int = 300) -> dict:
    """``python run.py ARGS`` from ``cwd``, which must succeed; the ``results`` of the run's
    ``analysis_results.json`` (one run: the only one under ``cwd/outputs``)."""
    import json

    proc = run_cli(args, cwd, timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (results,) = (cwd / "outputs").rglob("analysis_results.json")
    return json.loads(results.read_text())["results"]


def mlflow_runs(uri: str, experiment: str, parents: bool = False):
    """The experiment's runs: the jobs' runs, and with ``parents`` the sweeps' parent runs too."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"no MLflow experiment {experiment!r}"
    runs = client.search_runs([exp.experiment_id])
    return client, [r for r in runs if parents or r.data.tags.get("modelxray.sweep_parent") != "true"]


@pytest.fixture(scope="session")
def digits():
    """The digits split every classifier test evaluates (seeded, 25% test)."""
    from modelxray.data.digits import load_digits_split

    return load_digits_split(0.25, 0)


@pytest.fixture(scope="session")
def mlp():
    """The digits MLP trained for 20 epochs now (not from the disk cache, so training is what is tested)."""
    from modelxray.models.digits_classifier import DigitsClassifierSource

    return DigitsClassifierSource(epochs=20, use_disk_cache=False).load()


@pytest.fixture(scope="session")
def trained_tiny(tmp_path_factory):
    """The tiny GPT-2 trained for a few seconds on the docs text, so quantization and noise have
    something to destroy. Returns (LoadedModel, TokenData) with 128-token windows."""
    from helpers import train_tiny_once

    return train_tiny_once(str(tmp_path_factory.mktemp("tok")))


def flat(value) -> list:
    """Nested tuples, lists and dicts (by sorted key) as one flat list, for ``pytest.approx``, which
    compares flat sequences and mappings only."""
    if isinstance(value, dict):
        return [x for k in sorted(value) for x in [k, *flat(value[k])]]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in flat(v)]
    return [value]


def approx_nested(got, want, **kwargs) -> bool:
    """``got == pytest.approx(want)`` for nested data: same shape and keys, numbers close."""
    a, b = flat(got), flat(want)
    if len(a) != len(b):
        return False
    return all(x == pytest.approx(y, **kwargs) if isinstance(y, float | int) else x == y for x, y in zip(a, b))
