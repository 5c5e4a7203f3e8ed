"""Memory close to the weights: the original weights kept on disk and read back bit-exact, the
quant stage in place when nothing needs the loaded weights, a copy when a sweep shares them."""

import copy

import pytest
import torch
from torch import nn

from conftest import TINY_JOB
from modelxray import api
from modelxray.app import JobInfo, run
from modelxray.core.original_weights import OriginalWeights, resolve_place
from modelxray.models import process_cache


class _Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(11, 6)
        self.body = nn.Sequential(nn.Linear(6, 6), nn.LayerNorm(6), nn.BatchNorm1d(6))
        self.head = nn.Linear(6, 11, bias=False)
        self.head.weight = self.embed.weight  # tied, as GPT-2's and SmolLM2's


@pytest.mark.parametrize("where", ["disk", "memory", "cpu"])
def test_original_weights_come_back_bit_exact_after_in_place_changes_casts_and_swaps(where, tmp_path):
    torch.manual_seed(0)
    model = _Tied()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with OriginalWeights(model, where, tmp_path) as kept:
        assert len(kept.entries) == 10 and kept.aliases["head.weight"] == "embed.weight"  # the tied tensor once
        assert kept.nbytes == sum(v.numel() * v.element_size() for k, v in before.items() if k != "head.weight")
        with torch.no_grad():
            model.body[0].weight.mul_(3)  # in place
            model.body[2].running_mean.add_(1)  # a buffer
        model.to(torch.bfloat16)  # a cast: same Parameter objects, new data
        model.body[0].bias = nn.Parameter(torch.zeros(6, dtype=torch.float16))  # a swapped parameter
        kept.restore()
        state = model.state_dict()
        assert all(torch.equal(v, state[k]) and v.dtype == state[k].dtype for k, v in before.items())
        assert model.head.weight is model.embed.weight  # still tied
        with torch.no_grad():
            model.head.weight.add_(1)
        kept.restore(["head.weight"])  # by any of its names
        assert torch.equal(model.embed.weight, before["embed.weight"])
    assert list(tmp_path.iterdir()) == []  # an unnamed temporary file, gone with the process


def test_original_weights_of_named_tensors_only_and_a_bad_name():
    model = _Tied()
    kept = OriginalWeights(model, "memory", names=["body.0.weight"])
    assert list(kept.entries) == ["body.0.weight"]
    with pytest.raises(KeyError, match="body.9.weight"):
        OriginalWeights(model, "memory", names=["body.9.weight"])
    assert resolve_place("auto", model) == "disk"
    with pytest.raises(ValueError, match="runtime.original_weights"):
        resolve_place("tape", model)


def test_a_bad_original_weights_place_is_one_line_before_work():
    from modelxray.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"runtime.original_weights.*disk, memory, cpu"):
        api.analyze(overrides=[*TINY_JOB, "runtime.original_weights=tape"])


def _config(overrides):
    from omegaconf import open_dict

    cfg = api.compose(overrides)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


def test_a_single_run_quantizes_in_place_and_a_sweep_job_quantizes_a_copy(tmp_path, monkeypatch):
    process_cache.clear()
    cfg = _config([*TINY_JOB, "quant=int4", "tracker=none", "model_cache_size=1"])
    copies, real_deepcopy = [], copy.deepcopy
    monkeypatch.setattr(
        copy, "deepcopy", lambda x, *a, **k: copies.append(1) if isinstance(x, nn.Module) else real_deepcopy(x, *a, **k)
    )
    single = run(cfg, JobInfo(output_dir=tmp_path / "single"))
    assert "quantized in place (a single run)" in single.results["quant"].insights[-1]
    assert copies == [] and len(process_cache._CACHE) == 0  # the quantized model is not the cached one
    monkeypatch.setattr(copy, "deepcopy", real_deepcopy)

    job = JobInfo(output_dir=tmp_path / "job0", sweep_dir=str(tmp_path), job_num=0)
    swept = run(cfg, job)
    assert "quantized a copy" in swept.results["quant"].insights[-1]
    (loaded,) = process_cache._CACHE.values()  # the loaded model, kept for the next job, unquantized
    fresh = _config([*TINY_JOB, "tracker=none"])
    again = run(fresh, JobInfo(output_dir=tmp_path / "job1", sweep_dir=str(tmp_path), job_num=1))
    assert again.metrics["performance/perplexity"] < swept.metrics["performance/perplexity"]
    # the same quality on the same text: in place and on a copy give the same quantized model
    assert single.metrics["performance/perplexity"] == pytest.approx(swept.metrics["performance/perplexity"])
    process_cache.clear()


@pytest.mark.parametrize("where, said", [("memory", "as a copy in memory"), ("disk", "temporary file")])
def test_runtime_original_weights_chooses_where_bitwidth_keeps_them(where, said, tmp_path):
    out = api.analyze(
        [
            "debug=tiny",
            "model.n_layer=1",
            "dataset.max_tokens=512",
            "dataset.seq_len=64",
            "analyzer=bitwidth",
            "analyzer.bitwidth.uniform_bits=[4]",
            "analyzer.bitwidth.mixed=false",
            "analyzer.bitwidth.progressive=false",
            "analyzer.bitwidth.sensitivity=false",
            f"runtime.original_weights={where}",
        ],
        output_dir=tmp_path,
    )
    assert said in out.results["bitwidth"].sentences(out.results)[-1]
