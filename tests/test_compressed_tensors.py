"""quant=ct_*: compressed-tensors checkpoints (llm-compressor's and vLLM's format). The model under
analysis is the saved checkpoint loaded back through transformers; its weights are checked against a
hand computation of the scheme, its sizes against the checkpoint's tensors; a checkpoint saved this
way loads as a subject with model=hf and compares with its float original."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

import modelxray

pytest.importorskip("compressed_tensors", reason="compressed-tensors is not installed")


def _llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=257, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
    )  # fmt: skip
    return LlamaForCausalLM(config).eval()


def _w4a16(w: torch.Tensor) -> torch.Tensor:
    """Symmetric int4 in groups of 128 by hand: scale = max|w| / 7.5 per group, codes clamped to [-8, 7]."""
    groups = w.reshape(w.shape[0], -1, 128)
    scale = groups.abs().amax(-1, keepdim=True) / 7.5
    return (torch.clamp(torch.round(groups / scale), -8, 7) * scale).reshape(w.shape)


def _w8_channel(w: torch.Tensor) -> torch.Tensor:
    scale = w.abs().amax(-1, keepdim=True) / 127.5
    return torch.clamp(torch.round(w / scale), -128, 127) * scale


CASES = [  # option, the weight by hand, bytes stored for an out x in layer (codes and float32 scales)
    ("ct_w4a16", _w4a16, lambda o, i: o * i // 2 + o * (i // 128) * 4),
    ("ct_w8a8", _w8_channel, lambda o, i: o * i + o * 4),
]


@pytest.mark.parametrize(("option", "by_hand", "stored_bytes"), CASES)
def test_the_checkpoint_holds_the_schemes_weights_and_loads_back(option, by_hand, stored_bytes, tmp_path):
    from safetensors import safe_open

    model = _llama()
    quantized, report = modelxray.quantize(
        model,
        {
            "_target_": "modelxray.quant.ct_backend.CompressedTensorsQuantizer",
            "scheme": option[3:].upper(),
            "save_dir": str(tmp_path / "ckpt"),
        },
    )
    rows = {r["module"]: r for r in report.tables["layers"]}
    assert len(rows) == 14 and "lm_head" not in rows  # 7 Linear layers x 2 blocks; the LM head as loaded
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())["quantization_config"]
    assert config["quant_method"] == "compressed-tensors"
    assert config["format"] == ("pack-quantized" if option == "ct_w4a16" else "int-quantized")
    with safe_open(tmp_path / "ckpt" / "model.safetensors", "pt") as f:
        for name, row in rows.items():
            original = model.get_submodule(name).weight.detach()
            got = quantized.get_submodule(name).weight.detach()
            assert torch.allclose(got, by_hand(original), atol=1e-6), name  # the weight it computes with
            stored = [f.get_tensor(k) for k in f.keys() if k.rsplit(".", 1)[0] == name and "shape" not in k]
            assert row["packed_bytes"] == sum(t.numel() * t.element_size() for t in stored)  # what the checkpoint holds
            assert row["packed_bytes"] == stored_bytes(*original.shape)
    reloaded = AutoModelForCausalLM.from_pretrained(
        tmp_path / "ckpt"
    ).eval()  # as another user of the checkpoint loads it
    ids = torch.randint(0, 257, (2, 16))
    with torch.no_grad():
        assert torch.allclose(reloaded(ids).logits, quantized(ids).logits, atol=1e-5)
        if option == "ct_w8a8":  # its activations are rounded to int8 per token as well
            deq = torch.nn.functional.linear
            layer = quantized.model.layers[0].mlp.up_proj
            x = torch.randn(3, 256)
            assert not torch.allclose(layer(x), deq(x, layer.weight), atol=1e-6)


def test_a_saved_checkpoint_is_a_subject_compared_with_its_float_original(tmp_path):
    model = _llama()
    model.save_pretrained(tmp_path / "float")
    modelxray.quantize(
        model,
        {"_target_": "modelxray.quant.ct_backend.CompressedTensorsQuantizer", "save_dir": str(tmp_path / "w4a16")},
    )
    args = [
        "model=hf", f"model.name_or_path={tmp_path / 'w4a16'}", "model.tokenizer=byte", "reference=hf",
        f"reference.name_or_path={tmp_path / 'float'}", "reference.tokenizer=byte",
        "dataset.max_tokens=512", "dataset.seq_len=64", "tracker=none", "progress=false", "report.dashboard=false",
        "analyzer.performance.iters=1", "analyzer.performance.layer_timing=false", "analyzer.performance.speed_batch_sizes=[1]",
        "runtime.reference_cache_dir=null",
    ]  # fmt: skip
    out = modelxray.analyze(args, output_dir=tmp_path / "run")
    assert not out.failed, out.results["performance"].error
    assert 0 < out.metrics["performance/kl"] < 0.05 and out.metrics["performance/top1_agree"] > 0.5


def test_quant_impact_sweeps_compressed_tensors_and_bitsandbytes_with_the_others(tmp_path):
    pytest.importorskip("bitsandbytes")
    args = ["debug=tiny", "model.n_layer=1", "dataset.max_tokens=512", "dataset.seq_len=64", "report.dashboard=false"]
    strategies = "analyzer.quant_impact.strategies=[none,int4,ct_w8a8,bnb_nf4]"
    out = modelxray.analyze([*args, "analyzer=[quant_impact]", strategies], output_dir=tmp_path)
    assert not out.failed, out.results["quant_impact"].error
    m = out.metrics
    for s in ("ct_w8a8", "bnb_nf4"):
        assert (
            m[f"quant_impact/{s}_kl"] > 0 and m[f"quant_impact/{s}_weight_bytes"] < m["quant_impact/none_weight_bytes"]
        )
