"""Monitor metrics of the units and the loss surface: dead and saturated units per activation module
against a hand count, and the loss change under a filter-normalised weight perturbation against the
same perturbation made by hand."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel

from modelxray.core.errors import ConfigError
from modelxray.training_dynamics.config import ActivationConfig, DynamicsConfig, SharpnessConfig
from modelxray.training_dynamics.monitor import DynamicsMonitor


def _monitor(**sections) -> DynamicsMonitor:
    off = {"param_change": {"enabled": False}, "sparse": {"enabled": False}, "grad": {"enabled": False}}
    return DynamicsMonitor.create(DynamicsConfig(interval=1, optim={"enabled": False}, **off, **sections))


def test_dead_and_saturated_units_equal_a_hand_count():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 5), nn.Tanh())
    with torch.no_grad():
        net[0].bias[:2] = -100.0  # two ReLU units that never fire
        net[2].bias[:3] = 50.0  # three tanh units pinned at +1
    x = torch.randn(64, 4)
    monitor = _monitor(activations={"enabled": True})
    monitor.on_optimizer_step(net, inputs={"x": x})  # the snapshot
    m = monitor.on_optimizer_step(net, inputs={"x": x})
    with torch.no_grad():
        h = torch.relu(net[0](x))
        t = torch.tanh(net[2](h))
    dead = int((h.max(0).values <= 0).sum()) + int((t.max(0).values <= 0).sum())
    assert m["activations/dead_share"] == pytest.approx(dead / 11) and dead >= 2
    saturated = int((((t.abs() >= 0.98).float().mean(0)) >= 0.99).sum())
    assert m["activations/saturated_share"] == pytest.approx(saturated / 5) and saturated >= 3
    assert m["activations/1/dead_share"] == pytest.approx(int((h.max(0).values <= 0).sum()) / 6)
    assert m["activations/3/saturated_share"] == pytest.approx(saturated / 5)


def test_sharpness_is_the_loss_change_of_the_same_perturbation_by_hand():
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=257, n_positions=32)).eval()
    ids = torch.randint(0, 257, (2, 16))
    monitor = _monitor(sharpness={"enabled": True, "sigma": 0.05, "samples": 3, "seed": 7})
    monitor.on_optimizer_step(model, inputs={"input_ids": ids})
    m = monitor.on_optimizer_step(model, inputs={"input_ids": ids})

    def loss(params=None) -> float:
        with torch.no_grad():
            out = (
                model(input_ids=ids)
                if params is None
                else torch.func.functional_call(model, params, (), {"input_ids": ids})
            )
        return float(F.cross_entropy(out.logits[:, :-1].reshape(-1, 257), ids[:, 1:].reshape(-1)))

    gen = torch.Generator().manual_seed(7 + 1)  # seed + the measurement's number
    base, changes = loss(), []
    for _ in range(3):
        moved = {}
        for n, p in model.named_parameters():
            u = torch.randn(p.shape, generator=gen)
            moved[n] = p.detach() + 0.05 * p.detach().norm() / u.norm() * u
        changes.append(loss(moved) - base)
    mean = sum(changes) / 3
    assert m["sharpness/loss_increase"] == pytest.approx(mean, rel=1e-3)  # float32 rounding of the step apart
    se = math.sqrt(sum((c - mean) ** 2 for c in changes) / 2 / 3)
    assert m["sharpness/loss_increase_se"] == pytest.approx(se, rel=1e-2)
    assert m["sharpness/kl"] > 0 and m["sharpness/sigma"] == 0.05


def test_bad_section_values_are_one_line():
    with pytest.raises(ConfigError, match=r"^saturated_share: must lie in \(0, 1\]"):
        ActivationConfig(saturated_share=1.5)
    with pytest.raises(ConfigError, match=r"^sigma: must be positive"):
        SharpnessConfig(sigma=0)
    with pytest.raises(ConfigError, match=r"^sharpness.samples: must be positive"):
        DynamicsConfig(sharpness={"samples": 0})


def test_the_metrics_come_from_the_command_line(tmp_path):
    import modelxray

    args = ["model=tiny_gpt2", "model.n_layer=1", "train=finetune_lm", "train.steps=4", "train.interval=2",
            "train.checkpoint_every=null", "train.dynamics.activations.enabled=true",
            "train.dynamics.sharpness.enabled=true", "train.dynamics.sharpness.samples=2", "analyzer=[]",
            "tracker=none", "progress=false", "report.dashboard=false", "dataset.max_tokens=512", "dataset.seq_len=64",
            "train.seq_len=64"]  # fmt: skip
    out = modelxray.analyze(args, output_dir=tmp_path)
    last = out.results["train"].data["dynamics_history"][-1]
    assert 0 <= last["activations/dead_share"] <= 1 and last["sharpness/kl"] > 0 and "sharpness/loss_increase" in last
