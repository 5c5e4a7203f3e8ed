"""Inspect's advice names only what a user can act on: pruning and precision advice concern weight
matrices (not a ViT ``cls_token`` or a few-element position table) that ran on the inputs, pruning
never names a layer whose units are the model's outputs, an op that moved bytes faster than the
measured copy bandwidth is marked as having had its data in cache, and one far below both roofs is
latency-bound, not memory-bound."""

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


# -- advice only on what ran, never pruning the outputs, latency-bound ops --------------------------
def _sparse(layer: nn.Linear, g: torch.Generator) -> None:
    """Nine weights in ten near zero: the most prunable kind of layer."""
    with torch.no_grad():
        keep = torch.rand(layer.weight.shape, generator=g) < 0.1
        layer.weight.copy_(torch.randn(layer.weight.shape, generator=g) * (keep + 1e-3))


class TwoRates(nn.Module):
    """Two branches, as silero-vad's 16 kHz and 8 kHz models: the input's width picks one. Both are
    prunable; a 64-wide input never runs ``narrow``."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.wide = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
        self.narrow = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
        for layer in (self.wide[0], self.narrow[0], self.narrow[2]):
            _sparse(layer, g)

    def forward(self, x):
        if x.shape[-1] == 64:
            return self.wide(x)
        return self.narrow(x)


class ONet(nn.Module):
    """facenet's ONet head: a 2-unit face probability (through a softmax), 4 box offsets and 10
    landmarks, returned as a tuple; every layer prunable."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.dense5, self.prelu5 = nn.Linear(64, 128), nn.PReLU(128)
        self.dense6_1, self.softmax6_1 = nn.Linear(128, 2), nn.Softmax(dim=1)
        self.dense6_2, self.dense6_3 = nn.Linear(128, 4), nn.Linear(128, 10)
        for layer in (self.dense5, self.dense6_1, self.dense6_2, self.dense6_3):
            _sparse(layer, g)

    def forward(self, x):
        x = self.prelu5(self.dense5(x))
        return self.dense6_2(x), self.dense6_3(x), self.softmax6_1(self.dense6_1(x))


def _inspect(model, tmp_path, **kw):
    """Inspect as fast as it goes: no energy, one profiled forward, a tiny peak."""
    subject = Subject(model, None, None, ModelInfo(name="m", source_format="test", source_dtype="float32"))
    cfg = InspectAnalyzer(
        energy=False, spectral="none", profile_iters=1, profile_warmup=0, peak_matmul_size=64, advice_min_numel=64, **kw
    )
    result = cfg.run(subject, RunContext(tmp_path, progress=False))
    assert result.error is None, result.error
    return result


def _targets(result, *actions) -> set[str]:
    return {r["target"] for r in result.tables["recommendations"] if r["action"] in actions}


@pytest.mark.parametrize("scripted", [False, True], ids=["eager", "torchscript"])
def test_weights_that_did_not_run_on_the_inputs_are_not_advised(tmp_path, scripted):
    """A TorchScript file runs no hooks: the weights its traced ops never read still tell."""
    model = torch.jit.script(TwoRates().eval()) if scripted else TwoRates()
    result = _inspect(model, tmp_path, input_shape=[64])
    advised = _targets(result, "prune", "keep higher precision", "prune structurally")
    assert "wide.0.weight" in advised and not [t for t in advised if t.startswith("narrow")]
    assert result.metrics["weight_matrices_not_run"] == 2
    line = "2 weight matrices were left out of the prune and precision advice: they did not run on these inputs"
    assert line in result.texts["comprehensive_model_analysis.txt"]
    assert any(s.startswith(line) for s in result.source.insights(result, {}))


def test_without_a_forward_every_weight_is_advised(tmp_path):
    result = _inspect(TwoRates(), tmp_path, compute=False)
    assert {"narrow.0.weight", "narrow.2.weight"} <= _targets(result, "prune")
    assert "weight_matrices_not_run" not in result.metrics


def test_layers_that_write_the_outputs_are_never_pruned(tmp_path):
    """ONet's 2-unit dense6_1 reaches the outputs through a softmax; dense6_2 and dense6_3 directly."""
    result = _inspect(ONet(), tmp_path, input_shape=[64], precision_ratio=1e-9)
    pruned = _targets(result, "prune", "prune structurally")
    assert pruned == {"dense5.weight", "dense5"}
    assert result.data["output_layers"] == ["dense6_1", "dense6_2", "dense6_3"]
    assert {r["layer"] for r in result.tables["structured_pruning"]} == {"dense5"}
    assert "dense6_1.weight" in _targets(result, "keep higher precision")  # precision advice still applies


class Heads(nn.Module):
    """A detector-like model returning a dict: boxes as a view of a convolution's output, scores
    through a sigmoid function (not a module)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Conv2d(1, 8, 3, padding=1)
        self.box, self.cls = nn.Conv2d(8, 8, 1), nn.Conv2d(8, 3, 1)

    def forward(self, x):
        h = torch.relu(self.body(x))
        return {"boxes": self.box(h).flatten(2).view(x.shape[0], 4, -1), "scores": torch.sigmoid(self.cls(h))}


class Residual(nn.Module):
    """A transformer-like stream: every layer adds to it, a norm ends it; no layer writes the output."""

    def __init__(self):
        super().__init__()
        self.embed, self.mlp, self.norm = nn.Embedding(16, 8), nn.Linear(8, 8), nn.LayerNorm(8)

    def forward(self, ids):
        h = self.embed(ids) * 2.0
        return self.norm(h + self.mlp(h))


def _watched(model, x):
    from modelxray.analyzers.inspect.executed import Watch, output_layers, watching

    with watching(model.eval(), Watch()) as watch, torch.no_grad():
        model(x)
    return output_layers(model, watch), watch.ran


def test_what_the_forward_returns_names_the_output_layers():
    assert _watched(Heads(), torch.rand(1, 1, 6, 6)) == ({"box", "cls"}, {"", "body", "box", "cls"})
    assert _watched(Residual(), torch.tensor([[1, 2, 3]]))[0] == set()


class TiedLM(nn.Module):
    """A language model whose lm_head shares the token embedding and whose logits are soft-capped
    (a new tensor, as Gemma's): only ``get_output_embeddings`` names the head."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.embed = nn.Embedding(128, 32)
        self.mix = nn.Linear(32, 32)
        self.lm_head = nn.Linear(32, 128, bias=False)
        self.lm_head.weight = self.embed.weight
        _sparse(self.lm_head, g)
        _sparse(self.mix, g)

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids):
        return 30 * torch.tanh(self.lm_head(self.mix(self.embed(input_ids))) / 30)


def test_a_tied_lm_head_is_never_pruned(tmp_path):
    result = _inspect(TiedLM(), tmp_path, compute=False)
    assert _targets(result, "prune") == {"mix.weight"}  # the tied weight is named embed.weight
    assert result.data["output_layers"] == ["lm_head"]


def _latency_roof():
    """aten.native_layer_norm moves 40 kB in 2 ms (0.2% of a 10 GB/s roof, no FLOPs to speak of):
    bound by neither roof. aten.mul moves 3 MB in 1 ms: 30% of the memory roof."""
    peak = Peak(matmul_flops_per_s=1e11, memory_bytes_per_s=1e10, device="cpu", dtype="float32", matmul_size=256)
    ops = [OpTraffic("aten.native_layer_norm", 4, 1000, 20000, 20000), OpTraffic("aten.mul", 1, 0, 2 * 10**6, 10**6)]
    times = [OpTime("aten.native_layer_norm", 4, 2e-3, 0.0), OpTime("aten.mul", 1, 1e-3, 0.0)]
    return advice.mark_latency_bound(roofline(ops, times, peak), 0.05), peak


def test_an_op_far_below_both_roofs_is_latency_bound_not_memory_bound():
    roof, peak = _latency_roof()
    bound = {r["op"]: r["bound"] for r in roof}
    assert bound == {"aten.native_layer_norm": "latency", "aten.mul": "memory"}
    assert [r["target"] for r in advice.memory_bound_advice(roof, 5)] == ["aten.mul"]
    (late,) = advice.latency_bound_advice(roof, 5, peak)
    assert late["target"] == "aten.native_layer_norm" and late["action"] == "latency-bound"
    assert "0.2% of the memory roof and 0.0% of the compute roof" in late["why"]
    assert "launching and dispatching" in late["why"] and "fewer bytes do not" in late["why"]
    with pytest.raises(ConfigError, match="roof_share_min"):
        InspectAnalyzer(roof_share_min=1.5)


def test_a_latency_bound_op_does_not_lead_the_executive_summary():
    from modelxray.analyzers.inspect.summary import executive_summary
    from modelxray.core.result import Result

    roof, peak = _latency_roof()
    recs = advice.latency_bound_advice(roof, 5, peak) + advice.memory_bound_advice(roof, 5)
    lines = executive_summary(Result("inspect", tables={"recommendations": recs}))
    assert lines[1].startswith("Finding 1: memory-bound aten.mul")
    assert lines[2].startswith("Finding 2: latency-bound aten.native_layer_norm")
