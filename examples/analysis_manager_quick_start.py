"""``ModelAnalysisManager`` and ``AnalysisConfig`` in your own training loop: measure how far the
weights moved every N optimizer steps, and whether a sparse update would have done the same.

    python examples/analysis_manager_quick_start.py

A 64-32-10 MLP trains on scikit-learn's digits (1,347 training images, offline) with SGD; both
loops run in a few seconds on 2 cores. The first is the quick start: an ``AnalysisConfig`` with
parameter change and sparse quality on, ``ModelAnalysisManager.create(config)``, and
``analyzer.on_optimizer_step(model, inputs=batch)`` after each ``optimizer.step()``, logging what it
returns. The second is a custom loop over several epochs that prints each measurement. ``wandb``
is a recorder standing in for Weights & Biases: the checks read back what the loop logged. The
asserts check ``{}`` between intervals, one measurement every 100 optimizer steps, the metric names
(``param_change/*``, ``sparse/*`` with the random baseline), nothing per layer or per component by
default, and finite values.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from modelxray.data.digits import load_digits_split
from modelxray.training_dynamics import AnalysisConfig, ModelAnalysisManager

THRESHOLDS = ("1e-08", "1e-06", "1e-04")  # the default thresholds, as metric names write them


class DigitsMLP(nn.Module):
    """Called on a batch ``{"x", "y"}`` it returns the loss (so ``loss = model(batch)``); on a
    tensor of pixels, the logits (what the sparse-quality probe forwards)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, batch):
        if torch.is_tensor(batch):
            return self.net(batch)
        return F.cross_entropy(self.net(batch["x"]), batch["y"])


class DigitsDataset(Dataset):
    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "y": self.y[i]}


class Recorder:
    """Stands in for ``wandb``: keeps every dict the loop logs."""

    def __init__(self):
        self.logged: list[dict[str, float]] = []

    def log(self, metrics: dict[str, float]) -> None:
        self.logged.append(dict(metrics))


wandb = Recorder()


def quick_start(model: nn.Module, dataloader: DataLoader, optimizer: torch.optim.Optimizer) -> ModelAnalysisManager:
    """Quick start: configure, create the manager, call it after every optimizer step."""
    # Configure analysis
    config = AnalysisConfig(
        interval=100,  # Measure every 100 optimizer steps
        param_change_enabled=True,
        sparse_quality_enabled=True,
    )

    # Create manager
    analyzer = ModelAnalysisManager.create(config)

    # In training loop
    for batch in dataloader:
        optimizer.zero_grad()
        loss = model(batch)
        loss.backward()
        optimizer.step()

        # Analyze (returns {} if not at measurement interval)
        metrics = analyzer.on_optimizer_step(model, inputs=batch)
        if metrics:
            wandb.log(metrics)
    return analyzer


def custom_training_loop(model, dataloader, optimizer, num_epochs: int) -> ModelAnalysisManager:
    """A custom training loop over several epochs, printing each measurement."""
    config = AnalysisConfig(interval=100)
    analyzer = ModelAnalysisManager.create(config)

    optimizer_step = 0
    for epoch in range(num_epochs):
        for batch in dataloader:
            optimizer.zero_grad()
            loss = model(batch)
            loss.backward()
            optimizer.step()
            optimizer_step += 1

            # Analyze
            metrics = analyzer.on_optimizer_step(model, inputs=batch)
            if metrics:
                print(f"Step {optimizer_step}: {metrics}")
    return analyzer


def check_metrics(metrics: dict[str, float]) -> None:
    """The metrics of the default config: global change statistics, sparsity at each
    threshold, sparse-update quality with a random baseline; per-layer and per-component breakdowns,
    gradient and momentum metrics are off by default."""
    for key in ("norm_l2", "norm_l1", "norm_max", "mean", "std"):
        assert f"param_change/{key}" in metrics, key
    for t in THRESHOLDS:
        sparsity, changed = metrics[f"param_change/sparsity_at_{t}"], metrics[f"param_change/changed_ratio_at_{t}"]
        assert 0.0 <= sparsity <= 1.0 and math.isclose(sparsity + changed, 1.0), t
        for m in ("kl", "cosine", "mse", "top1_agree"):
            assert f"sparse/{m}_at_{t}" in metrics and f"sparse/{m}_at_{t}_random" in metrics, (m, t)
        kept, dropped = metrics[f"sparse/kept_ratio_at_{t}"], metrics[f"sparse/unchanged_ratio_at_{t}"]
        assert math.isclose(kept + dropped, 1.0), t
        assert metrics[f"sparse/kl_at_{t}"] >= 0.0 and 0.0 <= metrics[f"sparse/top1_agree_at_{t}"] <= 1.0
        assert metrics[f"sparse/cosine_at_{t}"] <= 1.0 + 1e-9
    assert metrics["param_change/norm_max"] <= metrics["param_change/norm_l2"] <= metrics["param_change/norm_l1"]
    off = [k for k in metrics if k.startswith(("param_change/layer_", "param_change/component/", "grad/", "optim/"))]
    assert not off, off[:5]
    bad = [k for k, v in metrics.items() if not math.isfinite(v)]
    assert not bad, bad


def main() -> None:
    torch.set_num_threads(1)
    data = load_digits_split()
    train = DigitsDataset(data.x_train, data.y_train)

    model = DigitsMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    dataloader = DataLoader(train, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(0))
    analyzer = quick_start(model, dataloader, optimizer)
    steps = len(dataloader)  # 337: the first call snapshots, then steps 101, 201, 301 measure
    assert analyzer.step == steps and analyzer.measurements == (steps - 1) // 100 == len(wandb.logged) == 3
    for metrics in wandb.logged:
        check_metrics(metrics)
        assert metrics["param_change/steps"] == 100.0
    accuracy = float((model(data.x_test).argmax(-1) == data.y_test).float().mean())
    assert accuracy > 0.8, accuracy
    print(
        f"Quick Start: {len(wandb.logged)} measurements of {len(wandb.logged[0])} metrics; test accuracy {accuracy:.3f}"
    )

    model = DigitsMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    dataloader = DataLoader(train, batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(0))
    analyzer = custom_training_loop(model, dataloader, optimizer, num_epochs=2)
    assert analyzer.step == 2 * len(dataloader) == 170 and analyzer.measurements == 1
    assert not analyzer.errors, analyzer.errors
    print("all checks passed")


if __name__ == "__main__":
    main()
