"""Training dynamics: each metric against a hand computation, the monitor's lifecycle, plugins."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from modelxray.training_dynamics import DynamicsConfig, DynamicsError, DynamicsMonitor, ParamChangeConfig, SparseConfig
from modelxray.training_dynamics.change_stats import part_stats
from modelxray.training_dynamics.low_rank import rank_energy, top_svd
from modelxray.training_dynamics.naming import component, fmt_threshold, layer_index, parts
from modelxray.training_dynamics.sparse_quality import random_mask, top_mask


def _mlp(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 4))


def _only(families: str, **kw) -> DynamicsConfig:
    """A config with only the named families enabled."""
    sections = {
        "param_change": ParamChangeConfig(enabled="param_change" in families, **kw.get("pc", {})),
        "sparse": SparseConfig(enabled="sparse" in families, **kw.get("sp", {})),
        "grad": {"enabled": "grad" in families},
        "optim": {"enabled": "optim" in families},
    }
    return DynamicsConfig(interval=kw.get("interval", 1), **sections)


def test_param_change_equals_a_hand_computation():
    model = _mlp()
    cfg = _only(
        "param_change",
        pc={"thresholds": [1e-3, 0.05], "relative_thresholds": [2.0], "quantiles": [0.5, 0.9], "layer_threshold": 1e-3},
    )
    monitor = DynamicsMonitor.create(cfg)
    monitor.start(model)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    gen = torch.Generator().manual_seed(1)
    deltas = {}
    with torch.no_grad():
        for n, p in model.named_parameters():
            d = torch.randn(p.shape, generator=gen) * 0.05
            d[d.abs() < 0.02] = 0.0  # exact zeros: unchanged weights
            p.add_(d)
            deltas[n] = (p.detach() - before[n]).double()  # what float32 really stored
    m = monitor.on_optimizer_step(model, step=1, lr=0.01)
    d = torch.cat([v.reshape(-1) for v in deltas.values()])
    w0 = torch.cat([v.reshape(-1) for v in before.values()]).double()
    assert m["param_change/norm_l2"] == pytest.approx(float(d.norm()), rel=1e-6)
    assert m["param_change/norm_l1"] == pytest.approx(float(d.abs().sum()), rel=1e-6)
    assert m["param_change/norm_max"] == pytest.approx(float(d.abs().max()), rel=1e-6)
    assert m["param_change/mean"] == pytest.approx(float(d.mean()), abs=1e-9)
    assert m["param_change/std"] == pytest.approx(float(d.std(unbiased=False)), rel=1e-5)
    assert m["param_change/relative_l2"] == pytest.approx(float(d.norm() / w0.norm()), rel=1e-6)
    for t in (1e-3, 0.05):
        frac = float((d.abs() <= t).double().mean())
        assert m[f"param_change/sparsity_at_{fmt_threshold(t)}"] == pytest.approx(frac)
        assert m[f"param_change/changed_ratio_at_{fmt_threshold(t)}"] == pytest.approx(1 - frac)
    # relative threshold: 2 x lr x steps = 0.02
    assert m["param_change/threshold_rel2"] == pytest.approx(0.02)
    assert m["param_change/sparsity_at_rel2"] == pytest.approx(float((d.abs() <= 0.02).double().mean()))
    # the whole model is smaller than the quantile sample, so quantiles are exact
    assert m["param_change/abs_delta_q50"] == pytest.approx(float(np.quantile(d.abs().numpy(), 0.5)), rel=1e-6)
    assert m["param_change/abs_delta_q90"] == pytest.approx(float(np.quantile(d.abs().numpy(), 0.9)), rel=1e-6)
    # per layer (nn.Sequential: layers 0 and 2)
    for i in (0, 2):
        dl = torch.cat([deltas[f"{i}.weight"].reshape(-1), deltas[f"{i}.bias"]])
        wl = torch.cat([before[f"{i}.weight"].reshape(-1), before[f"{i}.bias"]]).double()
        assert m[f"param_change/layer_{i}/mean_abs_delta"] == pytest.approx(float(dl.abs().mean()), rel=1e-6)
        assert m[f"param_change/layer_{i}/relative_l2"] == pytest.approx(float(dl.norm() / wl.norm()), rel=1e-6)
        assert m[f"param_change/layer_{i}/sparsity"] == pytest.approx(float((dl.abs() <= 1e-3).double().mean()))


def test_chunked_statistics_equal_whole_tensor_ones_across_chunk_edges():
    torch.manual_seed(0)
    w0 = torch.randn(10_007)
    w = w0 + torch.randn(10_007) * 1e-3
    w[::7] = w0[::7]
    whole = part_stats(w, w0, [1e-4, 1e-3], chunk=1 << 20)
    chunked = part_stats(w, w0, [1e-4, 1e-3], chunk=333)
    assert torch.allclose(whole, chunked, rtol=1e-6, atol=1e-12)
    d = (w - w0).abs()
    assert int(whole[5]) == int((d <= 1e-4).sum()) and int(whole[6]) == int((d <= 1e-3).sum())


def test_gpt2_fused_qkv_is_split_and_names_map_to_llama_families():
    assert [p.component for p in parts("transformer.h.3.attn.c_attn.weight", (64, 192))] == [
        "q_proj",
        "k_proj",
        "v_proj",
    ]
    assert component("transformer.h.3.attn.c_proj.weight") == "o_proj"
    assert component("transformer.h.3.mlp.c_fc.weight") == "up_proj"
    assert component("transformer.h.3.mlp.c_proj.weight") == "down_proj"
    assert component("model.layers.7.mlp.gate_proj.weight") == "gate_proj"
    assert component("model.embed_tokens.weight") == "embeddings"
    assert component("model.layers.0.input_layernorm.weight") == "norms"
    assert layer_index("transformer.h.3.attn.c_attn.weight") == 3
    assert layer_index("model.layers.12.self_attn.q_proj.weight") == 12
    assert layer_index("model.norm.weight") is None
    assert fmt_threshold(1e-6) == "1e-06" and fmt_threshold(1e-4) == "1e-04" and fmt_threshold(0.5) == "0.5"


def test_interval_semantics_first_call_snapshots_and_reset():
    model = _mlp()
    monitor = DynamicsMonitor.create(_only("param_change", interval=3))
    assert monitor.on_optimizer_step(model) == {}  # first call: snapshot
    assert monitor.snapshot is not None and monitor.snapshot.step == 1
    assert monitor.on_optimizer_step(model) == {}
    assert monitor.on_optimizer_step(model) == {}
    measured = monitor.on_optimizer_step(model)  # step 4 = snapshot step + interval
    assert measured["param_change/steps"] == 3.0 and measured["param_change/norm_l2"] == 0.0
    assert monitor.snapshot.step == 4  # re-snapshotted
    assert monitor.on_optimizer_step(model) == {}
    # the architecture changes: a clear error that says to call reset()
    model.append(nn.Linear(4, 2))
    assert monitor.on_optimizer_step(model) == {}  # step 6: not due yet
    with pytest.raises(DynamicsError, match=r"changed since the snapshot.*call monitor.reset\(\)"):
        monitor.on_optimizer_step(model)  # step 7: due, and the parameters no longer match
    monitor.reset()
    assert monitor.on_optimizer_step(model) == {}  # snapshots the new architecture
    assert len(monitor.on_optimizer_step(model, final=True)) > 0  # final: measures the partial interval


class _Broken:
    name = "broken"
    calls = 0

    def compute(self, delta, snapshot, context):
        _Broken.calls += 1
        raise RuntimeError("boom")


class _Custom:
    name = "custom"

    def compute(self, delta, snapshot, context):
        return {"steps_seen": float(delta.steps), "n_tensors": float(len(snapshot.tensors))}


def test_a_raising_metric_is_reported_once_and_skipped_and_training_goes_on(caplog):
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    monitor = DynamicsMonitor.create(_only("param_change", interval=2)).add_metric(_Broken()).add_metric(_Custom())
    x, y = torch.randn(8, 6), torch.randn(8, 4)
    results = []
    for _ in range(7):
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        results.append(monitor.on_optimizer_step(model, optimizer=opt))
        opt.zero_grad()
    measured = [r for r in results if r]
    assert len(measured) == 3
    assert _Broken.calls == 1 and "broken" in monitor.errors
    assert sum("broken" in rec.getMessage() for rec in caplog.records) == 1
    assert all("custom/steps_seen" in r and "param_change/norm_l2" in r for r in measured)
    assert measured[0]["custom/n_tensors"] == 4.0
    with pytest.raises(TypeError, match="compute"):
        monitor.add_metric(object())


def test_threshold_zero_keeps_the_whole_update_and_random_masks_keep_exact_counts():
    model = _mlp()
    cfg = _only("sparse", sp={"thresholds": [0.0, 0.01], "keep_fractions": [0.3], "ranks": [1]})
    monitor = DynamicsMonitor.create(cfg, probe=torch.randn(16, 6))
    monitor.start(model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    m = monitor.on_optimizer_step(model, step=1)
    assert (
        m["sparse/kl_at_0"] == 0.0
        and m["sparse/top1_agree_at_0"] == 1.0
        and m["sparse/cosine_at_0"] == pytest.approx(1.0)
    )
    assert m["sparse/kept_ratio_at_0"] == 1.0
    assert 0 < m[f"sparse/kept_ratio_at_{fmt_threshold(0.01)}"] < 1
    n = sum(p.numel() for p in model.parameters())
    expected = sum(math.ceil(0.3 * p.numel()) for p in model.parameters()) / n
    assert m["sparse/kept_ratio_at_keep_30pct"] == pytest.approx(expected)
    gen = torch.Generator().manual_seed(0)
    for k in (0, 1, 17, 100):
        assert int(random_mask(torch.Size([10, 10]), k, gen).sum()) == k
    ties = torch.tensor([3.0, 1.0, 1.0, 1.0, 0.0, 2.0])
    assert int(top_mask(ties, 3).sum()) == 3 and top_mask(ties, 3)[[0, 5]].all()


def test_rank_r_energy_of_a_rank_r_matrix_is_one():
    torch.manual_seed(0)
    r = 3
    m = torch.randn(200, r) @ torch.randn(r, 150)
    total = float(m.double().norm() ** 2)
    for mode in ("exact", "lowrank"):
        u, s, v = top_svd(m, 8, mode=mode)
        e = rank_energy(s, total, [1, r, 8])
        assert e[r] == pytest.approx(1.0, abs=1e-5) and e[8] == pytest.approx(1.0, abs=1e-5)
        assert e[1] < 0.99
    # a random matrix spreads its energy: rank 8 of 150 holds little
    g = torch.randn(200, 150)
    _, s, _ = top_svd(g, 8, mode="exact")
    assert rank_energy(s, float(g.double().norm() ** 2), [8])[8] < 0.2


def test_adam_last_update_equals_the_real_step_and_grad_norms_undo_clipping():
    from modelxray.training_dynamics.optim_stats import is_decoupled, last_update

    model = _mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
    x, y = torch.randn(8, 6), torch.randn(8, 4)
    for _ in range(3):
        before = [p.detach().clone() for p in model.parameters()]
        ((model(x) - y) ** 2).mean().backward()
        raw = math.sqrt(sum(float(p.grad.norm() ** 2) for p in model.parameters()))
        coef = min(1.0, 0.1 / (raw + 1e-6))
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        opt.step()
        for p, b in zip(model.parameters(), before):
            u = last_update(p, opt.state[p], opt.param_groups[0], is_decoupled(opt))
            assert torch.allclose(u, b - p.detach(), atol=1e-6, rtol=1e-3)
        monitor = DynamicsMonitor.create(_only("grad", interval=1))
        monitor.start(model)
        m = monitor.on_optimizer_step(model, optimizer=opt, grad_scale=coef)
        assert m["grad/global_norm"] == pytest.approx(raw, rel=1e-4)
        assert m["grad/update_ratio_source"] == 1.0
        opt.zero_grad()


def test_after_real_fine_tuning_magnitude_masks_beat_random_masks():
    from modelxray.data.pydoc_topics import PydocTopics
    from modelxray.models.tiny_gpt2 import TinyGPT2Source
    from modelxray.training.config import TrainConfig
    from modelxray.training.dynamics_callback import TrainingDynamicsCallback
    from modelxray.training.loop import train
    from modelxray.training.tasks import make_task

    lm = TinyGPT2Source(device="cpu").load()
    data = PydocTopics(seq_len=64, max_tokens=1024).load(lm.tokenizer)
    cfg = TrainConfig(
        steps=16,
        lr=3e-4,
        batch_size=8,
        seq_len=64,
        interval=16,
        dynamics={
            "sparse": {"probe_seq_len": 64, "thresholds": [1e-6, 1e-4], "keep_fractions": [0.1], "ranks": [1, 8]}
        },
    )
    cb = TrainingDynamicsCallback(cfg.dynamics)
    out = train(lm.model, make_task("causal_lm", data, cfg), cfg, callbacks=[cb])
    (m,) = cb.history
    assert m["step"] == 16
    for lab in ("1e-06", "1e-04", "keep_10pct"):
        assert m[f"sparse/kl_at_{lab}"] < m[f"sparse/kl_at_{lab}_random"], lab
    assert m["sparse/rank8_energy"] > m["sparse/rank1_energy"] > 0
    assert m["sparse/kl_at_rank8"] < m["sparse/kl_at_rank1"]
    assert out.evals[-1]["eval_loss"] < out.evals[0]["eval_loss"]
    # the original (cached) model is untouched: training worked on a copy
    assert not any(p.requires_grad and p.grad is not None for p in lm.model.parameters())


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_snapshots_measure_against_the_rounded_weights(dtype):
    model = _mlp()
    monitor = DynamicsMonitor.create(
        DynamicsConfig(
            interval=1,
            snapshot_dtype=dtype,
            sparse={"enabled": False},
            grad={"enabled": False},
            optim={"enabled": False},
        )
    )
    monitor.start(model)
    assert all(t.dtype == getattr(torch, dtype) for t in monitor.snapshot.tensors.values())
    snap = {n: t.float() for n, t in monitor.snapshot.tensors.items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    m = monitor.on_optimizer_step(model, step=1)
    d = torch.cat([(p.detach() - snap[n]).reshape(-1) for n, p in model.named_parameters()]).double()
    assert m["param_change/norm_l2"] == pytest.approx(float(d.norm()), rel=1e-6)
    assert monitor.snapshot.nbytes == sum(p.numel() for p in model.parameters()) * 2
