"""The Lightning callbacks (``modelxray.training.lightning_callbacks``) inside a real
``lightning.Trainer`` on the CPU: their numbers equal what the plain monitor and trackers give on the
same steps of a hand-written loop (same seed, same batches), and they reach the trainer's logger and
the active MLflow run."""

from __future__ import annotations

import csv
import importlib
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, default_collate

from modelxray.core.errors import ConfigError
from modelxray.learning_dynamics import GradientFlowAnalyzer, LearningDynamicsAnalyzer, MemorizationDetector
from modelxray.training_dynamics import DynamicsConfig, DynamicsMonitor

N, D, C, BS, EPOCHS, CLIP = 64, 8, 4, 16, 2, 0.5
STEPS = EPOCHS * N // BS  # 8 optimizer steps


@pytest.fixture(scope="module")
def L():
    return pytest.importorskip("lightning", reason="the Lightning callbacks need lightning (modelxray[lightning])")


def _data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N + 32, D, generator=g)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    y[::7] = (y[::7] + 1) % C  # a few wrong labels, so that examples get forgotten
    train = TensorDataset(x[:N], y[:N], torch.arange(N))  # (x, y, dataset position)
    return train, TensorDataset(x[N:], y[N:])


def _loaders(shuffle: bool = True):
    train, val = _data()
    gen = torch.Generator().manual_seed(1) if shuffle else None
    return DataLoader(train, batch_size=BS, shuffle=shuffle, generator=gen), DataLoader(val, batch_size=BS)


def _module(L, returns: str = "dict"):
    """A tiny classifier as a LightningModule; ``returns``: what training_step returns ("dict": loss,
    logits and the batch's dataset positions; "loss": the bare loss)."""

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(D, 16), nn.ReLU(), nn.Linear(16, C))
            self.seen: list[torch.Tensor] = []  # each training batch's dataset positions, in order

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y, idx = batch
            self.seen.append(idx.clone())
            logits = self(x)
            loss = F.cross_entropy(logits, y)
            return {"loss": loss, "logits": logits, "indices": idx} if returns == "dict" else loss

        def validation_step(self, batch, batch_idx):
            return None

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-2)

    return Tiny()


def _trainer(L, callbacks, tmp_path: Path, **kwargs):
    from lightning.pytorch.loggers import CSVLogger

    kwargs.setdefault("logger", CSVLogger(tmp_path / "logs", name="run"))
    return L.Trainer(
        max_epochs=EPOCHS,
        accelerator="cpu",
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=callbacks,
        **kwargs,
    )


def _hand_loop(L, order, on_start=None, on_before_step=None, on_after_step=None, on_epoch=None, returns: str = "dict"):
    """The same training by hand: same module and Adam, the batches of ``order`` (the dataset
    positions Lightning fed, in its order; Lightning draws its shuffles from the loader's generator
    in its own way), gradients clipped to norm CLIP.
    Hooks: ``on_start(model)`` before the first step; ``on_before_step(model, loss, epoch, batch_idx)``
    after the backward, before clipping (Lightning's on_before_optimizer_step);
    ``on_after_step(model, opt, batch, logits, step, epoch, clip_coef)`` after the optimizer step;
    ``on_epoch(model, epoch)`` after each epoch."""
    model = _module(L, returns)
    train, _ = _data()
    batches = iter(order)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    if on_start:
        on_start(model)
    step = 0
    for epoch in range(EPOCHS):
        for batch_idx in range(N // BS):
            idx = next(batches, None)
            if idx is None:  # a run that stopped early
                return model
            x, y = train.tensors[0][idx], train.tensors[1][idx]
            opt.zero_grad()
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            loss.backward()
            if on_before_step:
                on_before_step(model, loss, epoch, batch_idx)
            raw = float(torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP))
            opt.step()
            step += 1
            if on_after_step:
                on_after_step(model, opt, (x, y, idx), logits, step, epoch, min(1.0, CLIP / (raw + 1e-6)))
        if on_epoch:
            on_epoch(model, epoch)
    return model


def _csv_rows(tmp_path: Path) -> list[dict[str, str]]:
    (path,) = (tmp_path / "logs").rglob("metrics.csv")
    with open(path) as f:
        return list(csv.DictReader(f))


def _logged(rows, key: str) -> dict[int, float]:
    return {int(r["step"]): float(r[key]) for r in rows if r.get(key)}


def test_dynamics_callback_equals_the_monitor_and_reaches_logger_and_mlflow(L, tmp_path, tracking_uri):
    import mlflow

    from modelxray.training.lightning_callbacks import DynamicsCallback

    cfg = dict(
        interval=2, sparse={"ranks": [1], "keep_fractions": [0.1]}, grad={"enabled": True}, optim={"enabled": True}
    )
    callback = DynamicsCallback(DynamicsConfig(**cfg))
    train_loader, val_loader = _loaders()
    trainer = _trainer(L, [callback], tmp_path, gradient_clip_val=CLIP)
    mlflow.set_tracking_uri(tracking_uri)
    try:
        mlflow.set_experiment("lightning_callbacks")
        with mlflow.start_run() as run:
            trainer.fit(module := _module(L), train_loader, val_loader)
    finally:
        mlflow.set_tracking_uri(None)

    # the plain monitor on the same steps, its probe the first rows of the validation set (the callback's)
    probe = default_collate([val_loader.dataset[i] for i in range(4)])
    monitor = DynamicsMonitor.create(DynamicsConfig(**cfg), probe=probe)
    expected = []

    def after(model, opt, batch, logits, step, epoch, coef):
        m = monitor.on_optimizer_step(model, batch, opt, step=step, final=step == STEPS, grad_scale=coef)
        if m:
            expected.append({"step": float(step), **m})

    _hand_loop(L, module.seen, on_start=lambda model: monitor.start(model, step=0), on_after_step=after)
    assert [r["step"] for r in callback.history] == [2.0, 4.0, 6.0, 8.0] == [r["step"] for r in expected]
    for got, want in zip(callback.history, expected):
        assert set(got) == set(want)
        for k in (k for k in want if not k.endswith("seconds_per_forward")):  # timings differ
            # grad/ divides by the clip coefficient: the callback's is the ratio of the norms after and
            # before clipping, the hand loop's torch's float32 formula; they agree to float32 rounding
            rel = 1e-6 if k.startswith("grad/") else 1e-12
            assert got[k] == pytest.approx(want[k], rel=rel, abs=1e-15), (int(want["step"]), k)
    # the grad/ norms are of the raw gradients, although Lightning clipped them
    assert any(r["grad/clip_coef"] < 1.0 for r in callback.history)
    assert callback.monitor.errors == {} and callback.monitor.warnings == []

    rows = _csv_rows(tmp_path)
    client = mlflow.tracking.MlflowClient(tracking_uri)
    for key in ("param_change/relative_l2", "grad/global_norm", "optim/effective_step_mean", "sparse/kl_at_rank1"):
        want = {int(r["step"]): r[key] for r in callback.history}
        assert _logged(rows, key) == pytest.approx(want, rel=1e-12), key
        hist = client.get_metric_history(run.info.run_id, key)
        assert {m.step: m.value for m in hist} == pytest.approx(want, rel=1e-12), key


def test_a_run_stopped_early_measures_the_rest_of_the_interval(L, tmp_path):
    """Stopped after step 3 by a callback that runs after it (as early stopping would): the monitor
    measured at step 2 (interval 2) and measures steps 2 -> 3 at on_train_end, logged at step 3."""
    from modelxray.training.lightning_callbacks import DynamicsCallback

    class StopAtThree(L.Callback):
        def on_train_batch_end(self, trainer, *args):
            trainer.should_stop = trainer.global_step == 3

    callback = DynamicsCallback({"interval": 2, "sparse": {"enabled": False}})
    module = _module(L)
    _trainer(L, [callback, StopAtThree()], tmp_path, gradient_clip_val=CLIP).fit(module, *_loaders())
    assert [r["step"] for r in callback.history] == [2.0, 3.0]
    monitor, expected = DynamicsMonitor.create(DynamicsConfig(interval=2, sparse={"enabled": False})), {}

    def after(model, opt, batch, logits, step, epoch, coef):
        expected.update(monitor.on_optimizer_step(model, batch, opt, step=step, final=step == 3))

    _hand_loop(L, module.seen, on_start=lambda model: monitor.start(model, step=0), on_after_step=after)
    last = callback.history[-1]
    assert last["param_change/norm_l2"] == pytest.approx(expected["param_change/norm_l2"], rel=1e-12)
    assert _logged(_csv_rows(tmp_path), "param_change/norm_l2")[3] == pytest.approx(last["param_change/norm_l2"])


def test_learning_callback_equals_the_trackers_from_the_steps_outputs(L, tmp_path):
    from modelxray.training.lightning_callbacks import LearningDynamicsCallback

    callback = LearningDynamicsCallback(num_classes=C, gradient_flow=True)
    train_loader, val_loader = _loaders()
    module = _module(L)
    calls = {"n": 0}
    module.forward = _counting(module.forward, calls)
    trainer = _trainer(L, [callback], tmp_path, gradient_clip_val=CLIP)
    trainer.fit(module, train_loader, val_loader)
    bare = _module(L)  # the same training without the callback: the evaluation passes left the order alone
    _trainer(L, [], tmp_path / "bare", logger=False, gradient_clip_val=CLIP).fit(bare, *_loaders())
    assert all(torch.equal(a, b) for a, b in zip(module.seen, bare.seen)) and len(bare.seen) == STEPS
    # one forward per training step and the memorization passes (training set, then validation set)
    # at each epoch's end: per-example tracking read the step's logits, no second forward
    assert calls["n"] == STEPS + EPOCHS * (N // BS + len(val_loader))

    examples, memo = LearningDynamicsAnalyzer(num_classes=C), MemorizationDetector(num_classes=C)
    flow: dict[str, GradientFlowAnalyzer] = {}
    stats, scores = [], []
    seq_train = DataLoader(train_loader.dataset, batch_size=BS)  # memorization's pass: the dataset in order

    def epoch_end(model, epoch):
        stats.append(examples.compute_epoch_statistics(seq_train, model, epoch))
        flow["flow"].compute_epoch_statistics(epoch)
        scores.append(memo.compute_memorization_scores(model, seq_train, val_loader, epoch))

    _hand_loop(
        L,
        module.seen,
        on_start=lambda model: flow.setdefault("flow", GradientFlowAnalyzer(model)),
        on_before_step=lambda model, loss, epoch, batch_idx: flow["flow"].track_batch_gradients(loss, epoch, batch_idx),
        on_after_step=lambda model, opt, b, logits, step, epoch, coef: examples.track_batch(
            model, b[0], b[1], b[2], epoch, outputs=logits
        ),
        on_epoch=epoch_end,
    )

    got = callback.examples.epoch_stats
    assert [s["epoch"] for s in got] == [0, 1]
    for g, w in zip(got, stats):
        assert g["accuracy"] == pytest.approx(w["accuracy"], rel=1e-9)
        assert g["avg_loss"] == pytest.approx(w["avg_loss"], rel=1e-6)
        assert g["class_accuracies"] == pytest.approx(w["class_accuracies"])
    want_patterns, got_patterns = examples.analyze_learning_patterns(), callback.examples.analyze_learning_patterns()
    assert got_patterns["forgetting_statistics"] == want_patterns["forgetting_statistics"]
    assert got_patterns["hard_examples"] == want_patterns["hard_examples"]
    for g, w in zip(callback.memorization.epoch_memorization, scores):
        assert g == pytest.approx(w, rel=1e-6)
    assert callback.gradient_flow.analyze_gradient_flow()["batches_measured"] == STEPS
    got_flow, want_flow = callback.gradient_flow.callback.norms(), flow["flow"].callback.norms()
    assert got_flow.shape == want_flow.shape and torch.allclose(torch.tensor(got_flow), torch.tensor(want_flow))

    rows = _csv_rows(tmp_path)
    ends = {0: N // BS, 1: STEPS}  # global_step at each epoch's end
    for epoch, w in enumerate(scores):
        for k in ("train_accuracy", "test_accuracy", "gap_accuracy", "test_loss"):
            assert _logged(rows, f"memorization/{k}")[ends[epoch]] == pytest.approx(w[k], rel=1e-6)
    for epoch, w in enumerate(stats):
        for k in ("examples/correct_share", "examples/forgetting_events_total", "cartography/mean_confidence"):
            assert _logged(rows, k)[ends[epoch]] == pytest.approx(w[k], rel=1e-6), k
    assert sorted(_logged(rows, "grad_flow/total_norm")) == list(range(1, STEPS + 1))


def _counting(forward, calls):
    def wrapped(*args, **kwargs):
        calls["n"] += 1
        return forward(*args, **kwargs)

    return wrapped


def test_learning_callback_without_logits_forwards_once_after_the_step(L, tmp_path):
    """A step returning a bare loss: one no-grad forward per batch after the optimizer step, positions
    from the running count of a loader that does not shuffle; equal to track_batch without outputs.
    Memorization every second epoch."""
    from modelxray.training.lightning_callbacks import LearningDynamicsCallback

    callback = LearningDynamicsCallback(num_classes=C, memorization={"every_n_epochs": 2})
    train_loader, val_loader = _loaders(shuffle=False)
    module = _module(L, "loss")
    _trainer(L, [callback], tmp_path, gradient_clip_val=CLIP).fit(module, train_loader, val_loader)

    examples, stats = LearningDynamicsAnalyzer(num_classes=C), []
    _hand_loop(
        L,
        module.seen,
        on_after_step=lambda model, opt, b, logits, step, epoch, coef: examples.track_batch(
            model, b[0], b[1], b[2], epoch
        ),
        on_epoch=lambda model, epoch: stats.append(examples.compute_epoch_statistics(train_loader, model, epoch)),
        returns="loss",
    )
    for g, w in zip(callback.examples.epoch_stats, stats):
        assert g["accuracy"] == pytest.approx(w["accuracy"]) and g["avg_loss"] == pytest.approx(w["avg_loss"], rel=1e-6)
    assert callback.examples.recorder.n_epochs == EPOCHS
    assert [m["epoch"] for m in callback.memorization.epoch_memorization] == [1]  # every second epoch


def test_shuffled_loader_without_indices_is_one_line_error(L, tmp_path):
    from modelxray.training.lightning_callbacks import LearningDynamicsCallback

    train_loader, _ = _loaders(shuffle=True)
    trainer = _trainer(L, [LearningDynamicsCallback(memorization=False)], tmp_path, max_steps=1)
    with pytest.raises(ConfigError, match=r"^indices: the training loader shuffles.*outputs\['indices'\]"):
        trainer.fit(_module(L, "loss"), train_loader)


def test_bad_options_fail_before_training(L):
    from modelxray.training.lightning_callbacks import DynamicsCallback, LearningDynamicsCallback

    with pytest.raises(ConfigError, match="^config_or_monitor: must be a DynamicsConfig"):
        DynamicsCallback(42)
    with pytest.raises(ConfigError, match="^memorization: must be True, False"):
        LearningDynamicsCallback(memorization="yes")
    with pytest.raises(ConfigError, match="^not_an_option: is not an option of LearningDynamicsAnalyzer"):
        LearningDynamicsCallback(examples={"not_an_option": 1})
    with pytest.raises(ConfigError, match="^gradient_flow: must be True, False"):
        LearningDynamicsCallback(gradient_flow="all")
    with pytest.raises(ConfigError, match="^memorization.every_n_epochs: must be a positive integer, got 0"):
        LearningDynamicsCallback(memorization={"every_n_epochs": 0})


def test_missing_lightning_is_a_one_line_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "lightning.pytorch", None)  # as if lightning were not installed
    monkeypatch.delitem(sys.modules, "modelxray.training.lightning_callbacks", raising=False)
    with pytest.raises(
        ImportError,
        match=r'^modelxray.training.lightning_callbacks needs PyTorch Lightning: pip install "modelxray\[lightning\]"$',
    ):
        importlib.import_module("modelxray.training.lightning_callbacks")


def test_an_mlflow_logger_of_the_trainer_keeps_the_active_run_from_a_second_copy(L, monkeypatch):
    """With Lightning's MLFlowLogger among the loggers the metrics reach MLflow through it only;
    with other loggers they also go to the active run."""
    from types import SimpleNamespace

    import modelxray.tracking.mlflow_tracker as tracker
    from modelxray.training.lightning_callbacks import emit

    class Recorder:
        def __init__(self):
            self.rows = []

        def log_metrics(self, metrics, step):
            self.rows.append((step, metrics))

    class MLFlowLogger(Recorder):  # stands for lightning.pytorch.loggers.MLFlowLogger
        pass

    to_active_run = []
    monkeypatch.setattr(tracker, "log_to_active_run", lambda m, step: to_active_run.append((step, m)))
    monkeypatch.setitem(sys.modules, "mlflow", sys.modules.get("mlflow") or SimpleNamespace())
    csv_logger, mlflow_logger = Recorder(), MLFlowLogger()
    emit(SimpleNamespace(loggers=[csv_logger, mlflow_logger]), {"param_change/norm_l2": 0.5}, 7)
    assert csv_logger.rows == mlflow_logger.rows == [(7, {"param_change/norm_l2": 0.5})] and to_active_run == []
    emit(SimpleNamespace(loggers=[csv_logger]), {"param_change/norm_l2": 0.25}, 9)
    assert to_active_run == [(9, {"param_change/norm_l2": 0.25})] and csv_logger.rows[-1] == (
        9,
        {"param_change/norm_l2": 0.25},
    )
