"""``AnalysisConfig``: every option with its default, the ``minimal()`` and ``comprehensive()``
presets, and float16 snapshots to save memory.

    python examples/analysis_config_presets.py

``AnalysisConfig`` is a dataclass of flat keys with defaults; here every one of them is passed
explicitly (and checked to be the default), then read back as an attribute. The presets
``AnalysisConfig.minimal()`` (parameter change only, at a higher interval) and
``AnalysisConfig.comprehensive()`` (all metrics, measured more often) each monitor 510 Adam steps of
a 64-32-10 MLP on scikit-learn's digits with ``ModelAnalysisManager``; the asserts check which metric
families each one measures and how often. Last, ``snapshot_dtype="float16"`` for when memory is
short: a snapshot half the size of the float32 one, on the CPU. A few seconds on 2 cores.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from modelxray.data.digits import load_digits_split
from modelxray.training_dynamics import AnalysisConfig, ModelAnalysisManager

STEPS = 510  # minimal() measures once (step 501), comprehensive() ten times (51, 101, ... 501)


def every_option() -> AnalysisConfig:
    """Every ``AnalysisConfig`` field with its documented default, passed as keywords."""
    return AnalysisConfig(
        # Global
        interval=100,  # Measure every N optimizer steps
        snapshot_device="cpu",  # Where to store snapshots
        snapshot_dtype="float32",  # Dtype for snapshots
        # Parameter Change Analysis
        param_change_enabled=True,
        param_change_thresholds=[1e-8, 1e-6, 1e-4],
        param_change_per_layer=False,  # Per-layer breakdown
        param_change_track_components=False,  # Attention vs MLP
        # Sparse Quality Analysis
        sparse_quality_enabled=True,
        sparse_quality_thresholds=[1e-8, 1e-6, 1e-4],
        sparse_quality_include_random=True,  # Random baseline
        # Gradient and optimizer-moment analysis (off by default)
        gradient_enabled=False,
        momentum_enabled=False,
    )


DEFAULTS = {
    "interval": 100,
    "snapshot_device": "cpu",
    "snapshot_dtype": "float32",
    "param_change_enabled": True,
    "param_change_thresholds": [1e-8, 1e-6, 1e-4],
    "param_change_per_layer": False,
    "param_change_track_components": False,
    "sparse_quality_enabled": True,
    "sparse_quality_thresholds": [1e-8, 1e-6, 1e-4],
    "sparse_quality_include_random": True,
    "gradient_enabled": False,
    "momentum_enabled": False,
}


def train_with(config: AnalysisConfig, data) -> tuple[ModelAnalysisManager, list[dict[str, float]]]:
    """``STEPS`` Adam steps of a seeded MLP, monitored with ``config``; every non-empty measurement."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    dataloader = DataLoader(
        TensorDataset(data.x_train, data.y_train),
        batch_size=32,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
    )
    analyzer = ModelAnalysisManager.create(config)
    measured = []
    while analyzer.step < STEPS:
        for batch in dataloader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch[0]), batch[1])
            loss.backward()
            optimizer.step()
            metrics = analyzer.on_optimizer_step(model, inputs=batch, optimizer=optimizer)
            if metrics:
                measured.append(metrics)
            if analyzer.step == STEPS:
                break
    return analyzer, measured


def check_finite(measured: list[dict[str, float]]) -> None:
    bad = [k for m in measured for k, v in m.items() if not math.isfinite(v)]
    assert not bad, bad[:5]


def check_minimal(data) -> None:
    """Param change only (global statistics), at a higher interval than the default."""
    config = AnalysisConfig.minimal()
    assert isinstance(config, AnalysisConfig) and config.interval > AnalysisConfig().interval
    assert config.param_change_enabled and not config.param_change_per_layer
    assert not (config.sparse_quality_enabled or config.gradient_enabled or config.momentum_enabled)
    analyzer, measured = train_with(config, data)
    assert len(measured) == 1 == analyzer.measurements, len(measured)
    families = {k.split("/")[0] for k in measured[0]}
    assert families == {"param_change"}, families
    assert not any("/layer_" in k or "/component/" in k for k in measured[0])
    assert measured[0]["param_change/steps"] == config.interval
    check_finite(measured)
    print(f"minimal(): interval {config.interval}, {len(measured[0])} param_change metrics")


def check_comprehensive(data) -> None:
    """All metric families, per layer and per component, with random baselines, more often."""
    config = AnalysisConfig.comprehensive()
    assert config.interval < AnalysisConfig().interval
    assert all(
        getattr(config, key)
        for key in (
            "param_change_enabled",
            "param_change_per_layer",
            "param_change_track_components",
            "sparse_quality_enabled",
            "sparse_quality_include_random",
            "gradient_enabled",
            "momentum_enabled",
        )
    )
    analyzer, measured = train_with(config, data)
    assert len(measured) == (STEPS - 1) // config.interval == 10 and not analyzer.errors, analyzer.errors
    last = measured[-1]
    for key in (
        "param_change/norm_l2",
        "param_change/sparsity_at_1e-06",
        "param_change/layer_0/mean_abs_delta",
        "param_change/layer_2/sparsity",
        "param_change/component/other/mean_abs_delta",
        "sparse/kl_at_1e-06",
        "sparse/kl_at_1e-06_random",
        "sparse/top1_agree_at_1e-04",
        "grad/global_norm",
        "grad/layer_0/norm",
        "optim/second_moment_mean",
        "optim/effective_step_mean",
    ):
        assert key in last, key
    check_finite(measured)
    print(f"comprehensive(): interval {config.interval}, {len(last)} metrics per measurement")


def check_float16_snapshots(data) -> None:
    """Short of memory: ``snapshot_dtype="float16"`` halves the CPU snapshot."""
    sizes = {}
    for dtype in ("float32", "float16"):
        config = AnalysisConfig(interval=100, snapshot_dtype=dtype, sparse_quality_enabled=False)
        analyzer, measured = train_with(config, data)
        assert len(measured) == 5 and not analyzer.errors
        assert all(t.device.type == "cpu" for t in analyzer.snapshot.tensors.values())
        sizes[dtype] = analyzer.snapshot.nbytes
        check_finite(measured)
    n = 64 * 32 + 32 + 32 * 10 + 10
    assert sizes == {"float32": 4 * n, "float16": 2 * n}, sizes
    print(f"snapshot of {n} parameters: {sizes['float32']} bytes in float32, {sizes['float16']} in float16")


def main() -> None:
    torch.set_num_threads(1)
    config = every_option()
    assert config == AnalysisConfig(), "the documented values are the defaults"
    for key, value in DEFAULTS.items():
        assert getattr(config, key) == value, key
    data = load_digits_split()
    check_minimal(data)
    check_comprehensive(data)
    check_float16_snapshots(data)
    print("all checks passed")


if __name__ == "__main__":
    main()
