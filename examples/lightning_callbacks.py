"""Weight dynamics and learning dynamics inside a PyTorch Lightning ``Trainer``.

    pip install "modelxray[lightning]"
    python examples/lightning_callbacks.py [--out DIR]

A 64-64-10 MLP trains on scikit-learn's digits for 6 epochs (Adam, shuffled batches of 64,
gradients clipped at norm 1; seconds on 2 cores) with both callbacks and a CSV logger:

- ``DynamicsCallback``: every 21 optimizer steps, how far the weights moved (``param_change/``),
  whether a sparse or low-rank update would have done the same (``sparse/``), the raw gradient
  norms (``grad/``) and Adam's effective step (``optim/``);
- ``LearningDynamicsCallback``: per-example forgetting and cartography from the logits the
  ``training_step`` already returns (``examples/``, ``cartography/``), and train vs validation
  accuracy at every epoch's end (``memorization/``).

The asserts check that every measurement reached the logger's ``metrics.csv`` at its step with the
callback's value, and what the trackers say after ``fit``: the analysis keys and the plots.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from learning_examples_setup import check_plots, digits_datasets, working_directory
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from modelxray.training.lightning_callbacks import DynamicsCallback, LearningDynamicsCallback
from modelxray.training_dynamics import DynamicsConfig

EPOCHS, BATCH, INTERVAL = 6, 64, 21


class DigitsClassifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y, index = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.log("train_loss", loss)
        # the logits (no second forward for the learning callback) and the batch's dataset positions
        # (the loader shuffles)
        return {"loss": loss, "logits": logits, "indices": index}

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_accuracy", (self(x).argmax(-1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=3e-3)


def main(out: Path) -> None:
    train, test = digits_datasets()
    x, y = train.tensors
    train_loader = DataLoader(
        TensorDataset(x, y, torch.arange(len(y))),  # (pixels, label, dataset position)
        batch_size=BATCH,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
    )
    val_loader = DataLoader(test, batch_size=256)

    dynamics = DynamicsCallback(
        DynamicsConfig(interval=INTERVAL, sparse={"ranks": [1, 8]}, grad={"enabled": True}, optim={"enabled": True})
    )
    learning = LearningDynamicsCallback(num_classes=10)
    trainer = L.Trainer(
        max_epochs=EPOCHS,
        accelerator="cpu",
        gradient_clip_val=1.0,
        logger=CSVLogger(out, name="digits"),
        callbacks=[dynamics, learning],
        log_every_n_steps=10,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(DigitsClassifier(), train_loader, val_loader)

    steps = EPOCHS * len(train_loader)
    rows = _metrics(out)
    # weight dynamics: every INTERVAL steps and at the last, each value logged at its step
    measured = [int(r["step"]) for r in dynamics.history]
    assert measured == [*range(INTERVAL, steps + 1, INTERVAL), *([steps] if steps % INTERVAL else [])], measured
    for key in ("param_change/relative_l2", "sparse/kl_at_keep_10pct", "grad/global_norm", "optim/effective_step_mean"):
        logged = _series(rows, key)
        assert logged == {int(r["step"]): r[key] for r in dynamics.history if key in r}, key
    last = dynamics.history[-1]
    assert 0 < last["param_change/relative_l2"] < 1
    assert last["sparse/kl_at_keep_10pct"] < last["sparse/kl_at_keep_10pct_random"]  # the largest changes matter
    assert dynamics.monitor.errors == {}

    # learning dynamics: one row per epoch at the epoch's last step
    epoch_ends = [len(train_loader) * (e + 1) for e in range(EPOCHS)]
    for key in ("examples/correct_share", "cartography/mean_confidence", "memorization/test_accuracy"):
        assert sorted(_series(rows, key)) == epoch_ends, key
    memo = learning.memorization.epoch_memorization
    assert _series(rows, "memorization/test_accuracy")[steps] == memo[-1]["test_accuracy"] > 0.9
    analysis = learning.examples.analyze_learning_patterns()
    assert analysis["total_examples_tracked"] == 1000 and analysis["epochs_recorded"] == EPOCHS
    evolution = learning.memorization.analyze_memorization_evolution()
    assert evolution["epochs_tracked"] == EPOCHS
    plots = learning.examples.plot_learning_dynamics(save_dir=out / "plots")
    plots.update(learning.memorization.plot_memorization(save_dir=out / "plots"))
    check_plots(plots, "cartography_map.png", "forgetting_histogram.png", "memorization.png")

    f = analysis["forgetting_statistics"]
    print(
        f"{steps} steps, {len(measured)} dynamics measurements; last interval: weights moved "
        f"{last['param_change/relative_l2']:.3g} of their norm, top-10% update KL "
        f"{last['sparse/kl_at_keep_10pct']:.2e} vs random {last['sparse/kl_at_keep_10pct_random']:.2e}"
    )
    print(
        f"test accuracy {memo[-1]['test_accuracy']:.3f}, gap {memo[-1]['gap_accuracy']:+.3f}; "
        f"{f['examples_with_forgetting']} of {analysis['total_examples_tracked']} tracked examples forgotten at least once"
    )
    print("all checks passed")


def _metrics(out: Path) -> list[dict[str, str]]:
    (path,) = out.rglob("metrics.csv")
    with open(path) as f:
        return list(csv.DictReader(f))


def _series(rows: list[dict[str, str]], key: str) -> dict[int, float]:
    out = {int(r["step"]): float(r[key]) for r in rows if r.get(key)}
    assert all(math.isfinite(v) for v in out.values()), key
    return out


if __name__ == "__main__":
    with working_directory(__doc__) as out:
        main(out)
