"""quant=gguf_*: llama.cpp's own quantizer on a model from any source. The weights are the values
llama.cpp stores (checked against a hand computation of Q8_0 and against the gguf package's reader),
its choice of type per tensor is llama.cpp's (Q6_K for the tied embedding in Q4_K_M), the sizes are
its stored bytes, and it is a quant option and a quant_impact strategy."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import modelxray
from helpers import first_finding
from modelxray.core.errors import ConfigError

SKIP = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed")


def NEEDS(test):  # noqa: N802 - a decorator: the llama_cpp suite (pytest -m llama_cpp), skipped without it
    return pytest.mark.llama_cpp(SKIP(test))


def _llama(tied: bool = True) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied,
    )  # fmt: skip
    return LlamaForCausalLM(config).eval()


def _q8_0(w: torch.Tensor) -> torch.Tensor:
    """llama.cpp's Q8_0 by hand (quantize_row_q8_0_ref): blocks of 32, d = max|x| / 127 stored as
    float16, codes round(x / d)."""
    blocks = w.float().reshape(-1, 32)
    d = blocks.abs().amax(dim=1, keepdim=True) / 127
    codes = torch.round(blocks * torch.where(d > 0, 1 / d, torch.zeros_like(d)))
    return (codes * d.half().float()).reshape(w.shape)


def test_the_source_file_holds_each_tensor_once_under_llama_cpp_names(tmp_path):
    import gguf

    from modelxray.quant.gguf_impl import architecture, tensor_names, write_source

    model = _llama()
    arch = architecture(model)
    names = tensor_names(model, arch, set())
    assert arch == "llama" and names["blk.1.attn_v.weight"] == "model.layers.1.self_attn.v_proj.weight"
    assert "token_embd.weight" in names and "output.weight" not in names  # tied: written once, as the converter does
    write_source(model, tmp_path / "f32.gguf", arch, names)
    reader = gguf.GGUFReader(tmp_path / "f32.gguf")
    params = dict(model.named_parameters())
    assert {t.name for t in reader.tensors} == set(names)
    for t in reader.tensors:
        assert np.array_equal(
            np.asarray(t.data).reshape(params[names[t.name]].shape), params[names[t.name]].detach().numpy()
        )
    assert reader.fields["llama.block_count"].parts[-1][0] == 2
    assert reader.fields["llama.attention.head_count_kv"].parts[-1][0] == 2


def test_a_missing_llama_cpp_is_one_line(monkeypatch):
    from modelxray.quant.gguf_backend import GGUFQuantizer

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "llama_cpp" else real(n, *a))
    with pytest.raises(
        ConfigError, match=r"^quant: llama.cpp Q4_K_M needs the 'llama_cpp' package: pip install llama-cpp-python"
    ):
        GGUFQuantizer()
    with pytest.raises(ConfigError, match=r"^type: must be one of Q8_0, .*; got 'Q4_K_X'$"):
        GGUFQuantizer(type="Q4_K_X")


@NEEDS
def test_q8_0_weights_are_llama_cpps_stored_values():
    model = _llama()
    quantized, report = modelxray.quantize(model, "gguf_q8_0")
    rows = {r["module"]: r for r in report.tables["layers"]}
    assert len(rows) == 15 and {r["format"] for r in rows.values()} == {"Q8_0"}  # 7 Linear x 2 blocks + the embedding
    for name, row in rows.items():
        original = model.get_submodule(name).weight.detach()
        got = quantized.get_submodule(name).weight.detach()
        expected = _q8_0(original)
        d = original.abs().reshape(-1, 32).amax(dim=1).max() / 127
        assert (got == expected).float().mean() > 0.999 and (got - expected).abs().max() <= d  # rounding ties aside
        assert row["packed_bytes"] == original.numel() // 32 * 34  # a float16 scale and 32 int8 codes per block
        assert row["rel_error"] == pytest.approx(float((original - got).norm() / original.norm()), rel=1e-5)
    assert report.metrics["effective_bits"] == pytest.approx(8.5)
    assert not torch.equal(model.model.layers[0].mlp.up_proj.weight, quantized.model.layers[0].mlp.up_proj.weight)


@NEEDS
def test_q4_k_m_is_llama_cpps_mix_by_tensor_role():
    model = _llama()
    quantized, report = modelxray.quantize(model, "gguf_q4_k_m")
    formats = {r["module"]: r["format"] for r in report.tables["layers"]}
    # llama.cpp's Q4_K_M: Q6_K for the output (here the tied embedding) and for half the attn_v and
    # ffn_down tensors (the last of two layers), Q4_K for the rest
    assert formats["model.embed_tokens"] == "Q6_K"
    assert formats["model.layers.1.self_attn.v_proj"] == formats["model.layers.1.mlp.down_proj"] == "Q6_K"
    assert formats["model.layers.0.self_attn.q_proj"] == formats["model.layers.1.mlp.up_proj"] == "Q4_K"
    bits = {"Q4_K": 4.5, "Q6_K": 6.5625}  # bytes per 256-weight super-block x 8 / 256
    for r in report.tables["layers"]:
        assert r["bits"] == bits[r["format"]] and r["packed_bytes"] * 8 == r["elements"] * bits[r["format"]]
    assert quantized.lm_head.weight is quantized.model.embed_tokens.weight  # still tied
    assert "by its role in a 'llama' model" in first_finding(report)
    ids = torch.randint(0, 512, (2, 16))
    with torch.no_grad():
        p, q = model(ids).logits.softmax(-1), quantized(ids).logits.log_softmax(-1)
    kl = (p * (p.log() - q)).sum(-1).mean()
    assert 0 < kl < 0.05


@NEEDS
def test_a_model_llama_cpp_does_not_know_gets_the_base_type_on_every_linear():
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10), torch.nn.Linear(10, 3)
    )
    quantized, report = modelxray.quantize(
        model, {"_target_": "modelxray.quant.gguf_backend.GGUFQuantizer", "type": "Q4_K_M", "skip": ["3"]}
    )
    formats = {r["module"]: r["format"] for r in report.tables["layers"]}
    assert formats == {"0": "Q4_K", "2": "Q4_K"}  # "3" skipped; rows of 256 and 512 weights fill K super-blocks
    assert torch.equal(quantized[3].weight, model[3].weight)
    assert "does not know this architecture" in first_finding(report)


@NEEDS
def test_a_gguf_type_is_a_quant_option_and_a_quant_impact_strategy(tmp_path):
    args = ["debug=tiny", "model.n_layer=1", "dataset.max_tokens=512", "dataset.seq_len=64", "report.dashboard=false"]
    out = modelxray.analyze([*args, "quant=gguf_q8_0", "analyzer.performance.iters=1"], output_dir=tmp_path / "a")
    assert not out.failed and 0 < out.metrics["performance/kl"] < 0.01 and out.metrics["quant/effective_bits"] > 8
    strategies = "analyzer.quant_impact.strategies=[none,int4,gguf_q4_k_m]"
    out = modelxray.analyze([*args, "analyzer=[quant_impact]", strategies], output_dir=tmp_path / "b")
    assert not out.failed, out.results["quant_impact"].error
    assert out.metrics["quant_impact/gguf_q4_k_m_kl"] > 0
    assert out.metrics["quant_impact/gguf_q4_k_m_weight_bytes"] < out.metrics["quant_impact/none_weight_bytes"]


def test_quant_impact_lists_a_strategy_whose_library_is_missing_as_skipped(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "llama_cpp" else real(n, *a))
    args = ["debug=tiny", "model.n_layer=1", "dataset.max_tokens=512", "dataset.seq_len=64", "report.dashboard=false"]
    strategies = "analyzer.quant_impact.strategies=[none,int8,gguf_q4_k_m]"
    out = modelxray.analyze([*args, "analyzer=[quant_impact]", strategies], output_dir=tmp_path)
    assert not out.failed, out.results["quant_impact"].error
    (skipped,) = out.results["quant_impact"].tables["unsupported"]
    assert skipped["strategy"] == "gguf_q4_k_m" and "pip install llama-cpp-python" in skipped["reason"]
    assert "quant_impact/int8_kl" in out.metrics
    with pytest.raises(ConfigError, match=r"^quant: llama.cpp Q4_K_M needs the 'llama_cpp' package"):
        modelxray.analyze([*args, "quant=gguf_q4_k_m"], output_dir=tmp_path / "b")
