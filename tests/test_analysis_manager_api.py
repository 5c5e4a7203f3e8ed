"""The ModelAnalysisManager names of the dynamics monitor: flat config keys, their defaults, the
contradiction rule, presets, custom metrics written as MetricComputer subclasses, and the examples."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from modelxray.core.errors import ConfigError
from modelxray.training_dynamics import (
    AnalysisConfig,
    DynamicsConfig,
    DynamicsMonitor,
    MetricComputer,
    ModelAnalysisManager,
    ParamChangeConfig,
)
from modelxray.training_dynamics.aliases import FLAT_KEYS

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("analysis_*.py"))  # ModelAnalysisManager and AnalysisConfig


def _mlp(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 4))


def _train(model: nn.Module, monitor: DynamicsMonitor, steps: int, inputs=None) -> list[tuple[dict, float]]:
    """``steps`` SGD steps; every measurement with the gradient norm computed here by hand."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    out = []
    for _ in range(steps):
        x, y = torch.randn(8, 6, generator=gen), torch.randn(8, 4, generator=gen)
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
        metrics = monitor.on_optimizer_step(model, inputs=inputs)
        if metrics:
            grads = torch.cat([p.grad.reshape(-1).double() for p in model.parameters()])
            out.append((metrics, float(grads.norm())))
    return out


def test_flat_keys_map_onto_the_nested_sections_and_read_back():
    cfg = AnalysisConfig(
        interval=7,
        snapshot_dtype="bfloat16",
        param_change_enabled=False,
        param_change_thresholds=[1e-3],
        param_change_per_layer=True,
        param_change_track_components=True,
        sparse_quality_enabled=False,
        sparse_quality_thresholds=[0.0, 0.5],
        sparse_quality_include_random=False,
        gradient_enabled=True,
        momentum_enabled=True,
    )
    assert isinstance(cfg, DynamicsConfig) and cfg.interval == 7 and cfg.snapshot_dtype == "bfloat16"
    pc, sp = cfg.param_change, cfg.sparse
    assert (pc.enabled, pc.thresholds, pc.per_layer, pc.per_component) == (False, [1e-3], True, True)
    assert (sp.enabled, sp.thresholds, sp.random_baseline) == (False, [0.0, 0.5], False)
    assert cfg.grad.enabled and cfg.optim.enabled
    for key, (section, field, _) in FLAT_KEYS.items():
        assert getattr(cfg, key) == getattr(getattr(cfg, section), field), key
    cfg.param_change_per_layer = False  # writes through to the section the monitor reads
    assert cfg.param_change.per_layer is False
    # keys without a flat name keep DynamicsConfig's defaults
    assert sp.ranks == [1, 8, 64] and pc.relative_thresholds == [0.1, 1.0]


def test_defaults_are_the_documented_flat_defaults_and_nested_keys_take_precedence():
    assert AnalysisConfig() == AnalysisConfig(
        interval=100,
        param_change={"per_layer": False, "per_component": False},
        grad={"enabled": False},
        optim={"enabled": False},
    )
    cfg = AnalysisConfig()
    assert cfg.snapshot_device == "cpu" and cfg.snapshot_dtype == "float32"
    assert cfg.param_change_enabled and cfg.sparse_quality_enabled and cfg.sparse_quality_include_random
    assert not (cfg.param_change_per_layer or cfg.param_change_track_components)
    assert not (cfg.gradient_enabled or cfg.momentum_enabled)
    assert cfg.param_change_thresholds == cfg.sparse_quality_thresholds == [1e-8, 1e-6, 1e-4]
    # a nested key given wins over the flat default; a section instance is taken whole
    assert AnalysisConfig(param_change={"per_layer": True}).param_change_per_layer is True
    section = ParamChangeConfig(thresholds=[0.5])
    cfg = AnalysisConfig(param_change=section)
    assert cfg.param_change is section and cfg.param_change_per_layer is True
    # the same value twice is no contradiction
    assert AnalysisConfig(gradient_enabled=True, grad={"enabled": True}).grad.enabled


@pytest.mark.parametrize(
    ("kwargs", "flat", "nested"),
    [
        (
            {"param_change_enabled": True, "param_change": {"enabled": False}},
            "param_change_enabled",
            "param_change.enabled",
        ),
        (
            {"sparse_quality_thresholds": [1e-6], "sparse": {"thresholds": [1e-4]}},
            "sparse_quality_thresholds",
            "sparse.thresholds",
        ),
        (
            {"param_change_track_components": True, "param_change": ParamChangeConfig(per_component=False)},
            "param_change_track_components",
            "param_change.per_component",
        ),
        ({"momentum_enabled": True, "optim": {"enabled": False}}, "momentum_enabled", "optim.enabled"),
    ],
)
def test_a_flat_key_contradicting_a_nested_key_fails_in_one_line_naming_both(kwargs, flat, nested):
    with pytest.raises(ConfigError) as err:
        AnalysisConfig(**kwargs)
    msg = str(err.value)
    assert err.value.key == flat and nested in msg and "\n" not in msg, msg


def test_bad_flat_values_are_reported_under_the_flat_name():
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match=r"^snapshot_device: cuda: torch sees no GPU on this machine; use cpu$"):
            AnalysisConfig(snapshot_device="cuda")
    with pytest.raises(ConfigError, match=r"^snapshot_device: must be cpu, cuda or cuda:N, got 'tpu'$"):
        AnalysisConfig(snapshot_device="tpu")
    with pytest.raises(ConfigError, match=r"^param_change_enabled: expected bool"):
        AnalysisConfig(param_change_enabled="yes")
    with pytest.raises(ConfigError, match=r"^sparse_quality_thresholds: must be >= 0"):
        AnalysisConfig(sparse_quality_thresholds=[-1.0])
    with pytest.raises(ConfigError, match=r"^param_change\.per_layer: expected bool"):
        AnalysisConfig(param_change={"per_layer": "no"})


def test_presets_minimal_is_param_change_only_and_comprehensive_is_everything():
    minimal, full = AnalysisConfig.minimal(), AnalysisConfig.comprehensive()
    assert type(minimal) is AnalysisConfig and type(full) is AnalysisConfig
    assert minimal.interval == 500 > 100 > full.interval == 50
    assert minimal.param_change_enabled and not minimal.param_change_per_layer
    assert not (minimal.sparse_quality_enabled or minimal.gradient_enabled or minimal.momentum_enabled)
    assert not DynamicsConfig.minimal().grad.enabled
    assert all(getattr(full, key) for key in FLAT_KEYS if key.endswith(("enabled", "per_layer", "components")))
    monitor = ModelAnalysisManager.create(minimal)
    assert [c.name for c in monitor.computers] == ["param_change"]


def test_the_manager_is_the_monitor_with_the_flat_defaults():
    monitor = ModelAnalysisManager.create()
    assert isinstance(monitor, DynamicsMonitor) and isinstance(monitor.config, AnalysisConfig)
    assert [c.name for c in monitor.computers] == ["param_change", "sparse"]
    assert ModelAnalysisManager(AnalysisConfig()).computers == []  # the constructor adds none
    assert isinstance(ModelAnalysisManager.create(DynamicsConfig(interval=3)).config, DynamicsConfig)


def test_flat_thresholds_give_the_hand_computed_sparsity():
    model = _mlp()
    cfg = AnalysisConfig(interval=1, param_change_thresholds=[0.02], sparse_quality_enabled=False)
    monitor = ModelAnalysisManager.create(cfg)
    monitor.start(model)
    before = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.linspace(-0.05, 0.05, p.numel()).reshape(p.shape))
    m = monitor.on_optimizer_step(model, step=1)
    d = (torch.cat([p.detach().reshape(-1) for p in model.parameters()]) - before).double()
    assert m["param_change/sparsity_at_0.02"] == pytest.approx(float((d.abs() <= 0.02).double().mean()))
    assert m["param_change/norm_l2"] == pytest.approx(float(d.norm()), rel=1e-6)
    assert not any(k.startswith(("param_change/layer_", "param_change/component/")) for k in m)


class GradientNormMetric(MetricComputer):  # the documented custom metric, as written
    def compute(self, **kwargs):
        context = kwargs.get("context")
        if context is None or context.model is None:
            return {}

        total_norm = sum(p.grad.norm(2).item() ** 2 for p in context.model.parameters() if p.grad is not None)
        return {"gradient/total_norm": total_norm**0.5}


class StepsSeen(MetricComputer):  # the documented extension signature compute(delta, context, **kwargs)
    def compute(self, delta, context, **kwargs):
        return {"my_metric/value": float(delta.steps)}


class PositionalNames:  # modelxray's contract with other argument names: called positionally
    name = "pos"

    def compute(self, d, s, c):
        return {"tensors": float(len(s.tensors))}


class NotANumber(MetricComputer):  # the documented placeholder `...` left in place
    calls = 0

    def compute(self, delta, context, **kwargs):
        NotANumber.calls += 1
        return {"my_metric/value": ...}


def test_a_metric_computer_subclass_reports_its_metric_at_every_measurement_unprefixed():
    model = _mlp()
    monitor = (
        ModelAnalysisManager(AnalysisConfig(interval=2))
        .add_metric(GradientNormMetric())
        .add_metric(StepsSeen())
        .add_metric(PositionalNames())
    )
    measured = _train(model, monitor, steps=7)
    assert len(measured) == 3 and not monitor.errors, monitor.errors
    for metrics, by_hand in measured:
        assert set(metrics) == {"gradient/total_norm", "my_metric/value", "pos/tensors"}
        assert metrics["gradient/total_norm"] == pytest.approx(by_hand, rel=1e-6)
        assert metrics["my_metric/value"] == 2.0 and metrics["pos/tensors"] == 4.0
    assert set(monitor.timings) == {"GradientNormMetric", "StepsSeen", "pos"}


def test_a_metric_returning_a_non_number_is_skipped_once_and_a_compute_that_cannot_run_is_refused(caplog):
    NotANumber.calls = 0
    monitor = ModelAnalysisManager(AnalysisConfig(interval=1)).add_metric(NotANumber()).add_metric(StepsSeen())
    measured = _train(_mlp(), monitor, steps=4)
    assert NotANumber.calls == 1 and "NotANumber" in monitor.errors
    assert sum("NotANumber" in r.getMessage() for r in caplog.records) == 1
    assert [m for m, _ in measured] == [{"my_metric/value": 1.0}] * 3

    class TwoArgs:
        def compute(self, delta, context):
            return {}

    with pytest.raises(TypeError, match=r"cannot take \(delta, snapshot, context\)"):
        monitor.add_metric(TwoArgs())


def test_sparse_quality_waits_for_a_batch_with_one_warning_instead_of_failing():
    model = _mlp()
    monitor = ModelAnalysisManager.create(AnalysisConfig(interval=1, sparse_quality_thresholds=[0.0]))
    no_batch = _train(model, monitor, steps=3)
    assert all(not any(k.startswith("sparse/") for k in m) for m, _ in no_batch)
    assert len([w for w in monitor.warnings if "no probe batch" in w]) == 1 and not monitor.errors
    with_batch = _train(model, monitor, steps=2, inputs=torch.randn(5, 6))
    assert all(m["sparse/kl_at_0"] == 0.0 and m["sparse/top1_agree_at_0"] == 1.0 for m, _ in with_batch)


def test_every_seed001_example_is_collected():
    names = {p.stem for p in EXAMPLES}
    assert {"analysis_manager_quick_start", "analysis_config_presets", "analysis_manager_custom_metric"} <= names


def test_snapshots_and_deltas_are_immutable_and_a_delta_carries_its_own_statistics():
    import dataclasses

    from modelxray.training_dynamics.base import SPARSE_BELOW, ParameterDelta
    from modelxray.training_dynamics.snapshot import Snapshot

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    snap = Snapshot(model, step=0)
    assert dataclasses.is_dataclass(snap) and dataclasses.is_dataclass(ParameterDelta)
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.step = 5
    with pytest.raises(TypeError):
        snap.tensors["0.weight"] = torch.zeros(8, 8)  # a read-only mapping
    with pytest.raises(RuntimeError, match="[Ii]nference tensor"):
        snap.tensors["0.weight"].add_(1.0)  # its tensors refuse in-place changes
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        model[0].weight.add_(0.5)  # one tensor moves; the others stay
    delta = ParameterDelta(model, snap, steps=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        delta.steps = 2
    moved = torch.cat([(p.detach() - before[n]).reshape(-1) for n, p in model.named_parameters()])
    w0 = torch.cat([t.reshape(-1) for t in before.values()])
    assert delta.norm_l2 == pytest.approx(float(moved.norm()), rel=1e-6)
    assert delta.norm_l1 == pytest.approx(float(moved.abs().sum()), rel=1e-6)
    assert delta.norm_max == pytest.approx(0.5, rel=1e-6)
    assert delta.relative_change == pytest.approx(float(moved.norm() / w0.norm()), rel=1e-6)
    assert delta.sparsity == pytest.approx(float((moved.abs() <= SPARSE_BELOW).double().mean()))
    assert delta.sparsity == pytest.approx(1 - 64 / moved.numel())  # all but the 64 moved weights


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.gpu
def test_a_snapshot_on_the_gpu():
    from modelxray.training_dynamics.snapshot import Snapshot

    model = torch.nn.Linear(4, 4).cuda()
    snap = Snapshot(model, step=0, device="cuda")
    assert all(t.is_cuda for t in snap.tensors.values())
    assert AnalysisConfig(snapshot_device="cuda").snapshot_device == "cuda"
