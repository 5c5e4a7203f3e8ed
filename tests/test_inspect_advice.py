"""Inspect's advice names only what a user can act on: pruning and precision advice concern weight
matrices (not a ViT ``cls_token`` or a few-element position table), and an op that moved bytes
faster than the measured copy bandwidth is marked as having had its data in cache."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from modelxray.analyzers.inspect import InspectAnalyzer, advice
from modelxray.analyzers.inspect.weights import analyze_weights
from modelxray.core.errors import ConfigError
from modelxray.core.result import RunContext
from modelxray.core.subject import ModelInfo, Subject
from modelxray.measure.flops import OpTraffic
from modelxray.measure.op_profile import OpTime
from modelxray.measure.peak import Peak, roofline
from modelxray.metrics.tensor_stats import StatsConfig


class TinyViT(nn.Module):
    """The tensors of a ViT that matter here: a [1, 1, 64] class token and a [1, 5, 64] position
    table, both near zero but for one large value (the most prunable tensors by the statistics),
    beside two Linear layers: one sparse-ish, one Gaussian."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        spike = torch.full((64,), 1e-3)
        spike[3] = 5.0
        self.cls_token = nn.Parameter(spike.reshape(1, 1, 64).clone())
        self.pos_embed = nn.Parameter(spike.repeat(5).reshape(1, 5, 64).clone())
        self.sparse = nn.Linear(64, 64)
        self.dense = nn.Linear(64, 64)
        with torch.no_grad():
            keep = torch.rand(64, 64, generator=g) < 0.1
            self.sparse.weight.copy_(torch.randn(64, 64, generator=g) * (keep + 1e-3))
            self.dense.weight.copy_(torch.randn(64, 64, generator=g))

    def forward(self, x):
        return self.dense(self.sparse(x + self.cls_token[0, 0]))


@pytest.fixture(scope="module")
def rows():
    return analyze_weights(TinyViT(), StatsConfig(spectral="none"), progress=False)


def test_which_tensors_are_weight_matrices():
    assert not advice.is_weight_matrix([1, 1, 64], 0)  # a token stored with size-1 dimensions
    assert not advice.is_weight_matrix([64], 0) and not advice.is_weight_matrix([64, 1], 0)
    assert advice.is_weight_matrix([64, 64], 4096) and not advice.is_weight_matrix([64, 64], 4097)
    assert advice.is_weight_matrix([32, 16, 1, 1], 0)  # a 1x1 convolution kernel is a matrix
    assert advice.is_weight_matrix([1, 197, 768], 1024)  # a ViT position table, as GPT-2's wpe [1024, 768]
    assert not advice.is_weight_matrix([1, 5, 64], 1024)  # ... but not a 320-element one


def test_a_cls_token_and_a_small_position_table_are_never_advised(rows):
    by_name = {r["name"]: r for r in rows}
    # the statistics rate both as the most prunable tensors, above the sparse Linear weight
    for name in ("cls_token", "pos_embed"):
        assert by_name[name]["prune_potential"] > by_name["sparse.weight"]["prune_potential"] > 0.3
    min_numel = InspectAnalyzer().advice_min_numel
    prune = advice.prune_candidates(rows, top=10, prune_min=0.3, min_numel=min_numel)
    assert [r["target"] for r in prune] == ["sparse.weight"]
    # ratio 0: every tensor considered for precision advice is listed, and only the Linear weights are
    keep = advice.precision_candidates(rows, top=10, bits=4, ratio=0.0, min_numel=min_numel)
    assert sorted(r["target"] for r in keep) == ["dense.weight", "sparse.weight"]
    # without the floor, the position table (2 dims > 1) is a matrix again; the class token never is
    assert "pos_embed" in [r["target"] for r in advice.prune_candidates(rows, 10, 0.3, min_numel=0)]
    assert "cls_token" not in [r["target"] for r in advice.prune_candidates(rows, 10, 0.3, min_numel=0)]


def test_the_analyzer_recommends_only_weight_matrices(tmp_path):
    model = TinyViT()
    subject = Subject(model, None, None, ModelInfo(name="TinyViT", source_format="test", source_dtype="float32"))
    result = InspectAnalyzer(compute=False, energy=False, spectral="none").run(
        subject, RunContext(tmp_path, progress=False)
    )
    targets = {r["target"] for r in result.tables["recommendations"]}
    assert "sparse.weight" in targets and not targets & {"cls_token", "pos_embed"}
    said = result.source.insights(result, {})
    assert said and not [line for line in said if "cls_token" in line or "pos_embed" in line]
    with pytest.raises(ConfigError, match="advice_min_numel"):
        InspectAnalyzer(advice_min_numel=-1)


def _roof():
    """Copy bandwidth 10 GB/s. aten.add moves 3,000 bytes in 0.1 us (30 GB/s, 3x the copy
    bandwidth: in cache); aten.mul 3 MB in 1 ms (3 GB/s); aten.mm is compute-bound at half the peak."""
    peak = Peak(matmul_flops_per_s=1e11, memory_bytes_per_s=1e10, device="cpu", dtype="float32", matmul_size=256)
    ops = [
        OpTraffic("aten.add", 3, 0, 2000, 1000),
        OpTraffic("aten.mul", 1, 0, 2 * 10**6, 10**6),
        OpTraffic("aten.mm", 1, 10**9, 10**6, 0),
    ]
    times = [OpTime("aten.add", 3, 1e-7, 0.0), OpTime("aten.mul", 1, 1e-3, 0.0), OpTime("aten.mm", 1, 0.02, 0.0)]
    return {r["op"]: r for r in roofline(ops, times, peak)}


def test_ops_faster_than_the_copy_bandwidth_are_marked_in_cache():
    rows = _roof()
    add, mul, mm = rows["aten.add"], rows["aten.mul"], rows["aten.mm"]
    assert add["achieved_bytes_per_s"] == pytest.approx(3000 / 1e-7) and add["share_of_attainable"] == pytest.approx(3)
    assert add["in_cache"] is True
    assert mul["achieved_bytes_per_s"] == pytest.approx(3e9) and mul["in_cache"] is False
    assert mm["in_cache"] is False and mm["share_of_attainable"] == pytest.approx(0.5)


def test_the_cache_note_reaches_the_advice_and_the_text():
    roof = list(_roof().values())
    mem = advice.memory_bound_advice(roof, 5)
    why = {r["target"]: r["why"] for r in mem}
    assert "300% of the roof; faster than the measured copy bandwidth: its data sat in cache" in why["aten.add"]
    assert "cache" not in why["aten.mul"]
    note = advice.cache_note(roof, 10.0)
    assert note.startswith("aten.add moved bytes faster than the measured copy bandwidth (10.0 GB/s)")
    assert "not an error" in note
    assert advice.cache_note([r for r in roof if not r["in_cache"]], 10.0) is None


def test_precision_advice_after_quantization_where_most_matrices_lose_nothing():
    """A model quantized to 4 bits whose rows are narrower than a group is already on inspect's
    4-bit grid: the median error is 0, and only a matrix that still loses something is advised."""
    rows = [
        {
            "name": f"m{i}.weight",
            "shape": [64, 64],
            "numel": 4096,
            "quant_sensitivity": 0.0,
            "kurtosis": 0.0,
            "outlier_share": 0.0,
        }
        for i in range(4)
    ]
    rows.append({**rows[0], "name": "head.weight", "quant_sensitivity": 0.12})
    keep = advice.precision_candidates(rows, top=5, bits=4, ratio=1.25, min_numel=64)
    assert [r["target"] for r in keep] == ["head.weight"]
    assert "where most matrices lose nothing" in keep[0]["why"]


def test_inspect_runs_after_quantization(tmp_path):
    import modelxray

    args = ["debug=tiny", "model.n_layer=1", "quant=int4", "analyzer=inspect", "analyzer.inspect.compute=false"]
    out = modelxray.analyze([*args, "analyzer.inspect.energy=false", "report.dashboard=false"], output_dir=tmp_path)
    assert not out.failed, out.results["inspect"].error
