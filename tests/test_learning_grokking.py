"""Delayed generalization (grokking) on modular addition with a small p, driven by a short hand-written
loop (the project's training loop is tested elsewhere), with the learning callbacks attached.

Settings found by measurement (p=23, 80% of the pairs for training, MLP 46 -> 256 -> 23 without biases,
full-batch AdamW lr 1e-3, weight decay 1.0, betas (0.9, 0.98)): train accuracy reaches 95% at step ~140
and test accuracy at step ~2,600-2,850 for seeds 0-2, about 7 s for 5,000 steps with the callbacks on
one core."""

import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from modelxray.data.modular_addition import ModularArithmetic
from modelxray.learning_dynamics import ExampleDynamicsCallback, FeatureEvolutionCallback, MemorizationCallback
from modelxray.models.grokking import MLPSource
from modelxray.training.callbacks import TrainState

pytestmark = pytest.mark.slow  # long end-to-end runs: `pytest -m slow`


@pytest.fixture
def one_thread():
    """Small matrices gain nothing from a second thread, and two busy cores shared with other work make
    OpenMP threads wait for each other (a 6 s run took 4 minutes under load with 2 threads)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_train_accuracy_high_well_before_test_accuracy(one_thread):
    start = time.perf_counter()
    data = ModularArithmetic(p=23, train_fraction=0.8, seed=0).load()
    model = MLPSource(p=23, hidden=[256], seed=0, device="cpu").load().model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1.0, betas=(0.9, 0.98))
    mem = MemorizationCallback(every_n_epochs=10)
    examples = ExampleDynamicsCallback(every_n_epochs=10)
    features = FeatureEvolutionCallback(every_n_epochs=500, sample_split="train")
    callbacks = [examples, mem, features]
    state = TrainState(model=model, optimizer=opt, task=SimpleNamespace(data=data), lr=1e-3)
    for cb in callbacks:
        cb.on_train_begin(state)
    everything = torch.arange(len(data.y_train))
    model.train()
    with torch.enable_grad():
        for _ in range(4500):  # full batch: one step is one epoch
            logits = model(data.x_train)
            loss = F.cross_entropy(logits, data.y_train)
            opt.zero_grad()
            loss.backward()
            opt.step()
            state.step, state.epoch = state.step + 1, state.epoch + 1
            state.logits, state.indices = logits.detach(), everything
            for cb in callbacks:
                cb.on_step_end(state)
            for cb in callbacks:
                cb.on_epoch_end(state)
    for cb in callbacks:
        cb.on_train_end(state)
    report = mem.report()
    m = report.metrics
    t_train, t_test = m["transitions/train_accuracy/step"], m.get("transitions/test_accuracy/step")
    assert t_train <= 400, m
    assert t_test is not None and t_test >= 5 * t_train, m  # generalization comes much later
    assert m["transitions/delay_steps"] == t_test - t_train
    assert m["memorization/test_accuracy"] >= 0.95
    assert m["memorization/gap_open_step"] is not None and m["memorization/gap_close_step"] > t_train
    assert any("delayed generalization" in s for s in report.insights)
    test_cps = [r for r in report.tables["change_points"] if r["metric"] == "test_accuracy"]
    assert test_cps and t_train < test_cps[0]["step"] <= t_test + 200 and test_cps[0]["jump"] > 0.3
    ex = examples.report().metrics
    assert ex["examples/never_learned_share"] == 0.0 and ex["examples/epochs_recorded"] == 450
    fe = features.report()
    assert np.isfinite(fe.metrics["features/fourier_sparsity"]) and fe.metrics["features/weight_norm"] > 0
    assert len(fe.data["steps"]) == 1 + 4500 // 500
    assert time.perf_counter() - start < 60


def test_learning_dynamics_benchmark_runs_and_reports_its_targets():
    """scripts/bench_learning_dynamics.py, shortened: every configuration runs and the table names
    each target with a verdict (the full run is a benchmark, not a test)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, str(root / "scripts" / "bench_learning_dynamics.py"), "--steps", "20", "--repeat", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {line.split("|")[1].strip(): line for line in out.stdout.splitlines() if line.startswith("| ")}
    for name in (
        "no callbacks",
        "per-example statistics every step",
        "per-example statistics every 10 steps",
        "per-example statistics every step, separate no-grad pass",
        "feature evolution every 10 epochs",
    ):
        assert name in rows, out.stdout
    assert "<= 7%:" in rows["per-example statistics every step"]
    assert "<= 1%:" in rows["per-example statistics every 10 steps"]
    assert "forgetting + cartography of all 1,347 examples" in out.stdout
