"""The field's quantizers as strategies: optimum-quanto (int8/int4/int2 weights) and HQQ (4/3/2 bits).
Each runs through its library's own modules; the report's sizes are the tensors the library stores,
its weight error is against the library's own dequantization, and the layer computes with that
weight; each is a quant= option and a quant_impact strategy."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

import modelxray
from modelxray.core.errors import ConfigError

OPTIONS = {
    "quanto_int8": ("optimum.quanto", "QLinear"),
    "quanto_int4": ("optimum.quanto", "QLinear"),
    "quanto_int2": ("optimum.quanto", "QLinear"),
    "hqq_int4": ("hqq", "HQQLinear"),
    "hqq_int3": ("hqq", "HQQLinear"),
    "hqq_int2": ("hqq", "HQQLinear"),
    "bnb_nf4": ("bitsandbytes", "Linear4bit"),
    "bnb_fp4": ("bitsandbytes", "Linear4bit"),
    "bnb_int8": ("bitsandbytes", "Linear8bitLt"),
}


def _gpt2() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=128, n_head=2, vocab_size=257, n_positions=32)).eval()


def _stored(module) -> int:
    if type(module).__name__ == "HQQLinear":
        tensors = [module.W_q, module.meta["scale"], module.meta["zero"]]
    elif type(module).__name__ == "Linear4bit":  # packed codes (two per byte) and a float32 absmax per 64
        tensors = [module.weight.data, module.weight.quant_state.absmax]
    elif type(module).__name__ == "Linear8bitLt":  # int8 codes and a float32 scale per output channel
        tensors = [module.weight.data, _int8_scales(module)]
    else:
        tensors = [t for k, t in module.state_dict().items() if k.startswith("weight")]
    return sum(t.numel() * t.element_size() for t in tensors)


def _dequantized(module) -> torch.Tensor:
    if type(module).__name__ == "HQQLinear":
        return module.dequantize()
    if type(module).__name__ == "Linear4bit":
        import bitsandbytes as bnb

        return bnb.functional.dequantize_4bit(module.weight.data, module.weight.quant_state)
    if type(module).__name__ == "Linear8bitLt":
        return module.weight.data.float() * _int8_scales(module)[:, None] / 127
    return module.weight.dequantize()


def _int8_scales(module) -> torch.Tensor:
    """The row scales of bitsandbytes' int8 weight (they move to the layer's state at its first forward)."""
    return module.weight.SCB if module.weight.SCB is not None else module.state.SCB


@pytest.mark.parametrize("option", list(OPTIONS))
def test_the_report_is_what_the_library_stores_and_computes_with(option):
    library, layer_type = OPTIONS[option]
    pytest.importorskip(library, reason=f"{library} is not installed")
    model = _gpt2()
    quantized, report = modelxray.quantize(model, option)
    rows = {r["module"]: r for r in report.tables["layers"]}
    assert rows and all(type(quantized.get_submodule(n)).__name__ == layer_type for n in rows)
    assert type(model.transformer.h[0].attn.c_attn).__name__ == "Conv1D"  # the given model is left as it was
    x = torch.randn(3, 128)
    for name, row in rows.items():
        module = quantized.get_submodule(name)
        deq = _dequantized(module).float()
        original = model.get_submodule(name).weight.detach().t()  # GPT-2's Conv1D stores in x out
        assert row["packed_bytes"] == _stored(module)
        assert row["rel_error"] == pytest.approx(float((original - deq).norm() / original.norm()), rel=1e-5)
        if deq.shape[1] == 128:
            with torch.no_grad():
                expected = F.linear(x, deq, module.bias)  # bitsandbytes' int8 on CPU: the dequantized weight
                assert torch.allclose(module(x), expected, atol=1e-4, rtol=1e-4)  # it computes with that weight
    elements = sum(r["elements"] for r in rows.values())
    assert report.metrics["effective_bits"] == pytest.approx(
        8 * sum(_stored(quantized.get_submodule(n)) for n in rows) / elements
    )
    bits = int(option[-1])
    assert bits <= report.metrics["effective_bits"] < bits + 1.5  # the integers plus their scales and offsets
    if option in ("hqq_int4", "hqq_int2"):  # bytes of packed integers, a float32 scale and zero per 64 weights
        assert report.metrics["effective_bits"] == pytest.approx(bits + 2 * 32 / 64)
    if option in ("bnb_nf4", "bnb_fp4"):  # half a byte per code, a float32 absmax per block of 64
        assert report.metrics["effective_bits"] == pytest.approx(4 + 32 / 64)
    if option == "hqq_int3":  # 3-bit codes packed ten to a 32-bit word
        assert report.metrics["effective_bits"] == pytest.approx(3.2 + 2 * 32 / 64, abs=0.02)


def test_a_library_quantizer_is_a_quant_option_and_a_quant_impact_strategy(tmp_path):
    pytest.importorskip("optimum.quanto")
    pytest.importorskip("hqq")
    args = ["debug=tiny", "model.n_layer=1", "dataset.max_tokens=512", "dataset.seq_len=64", "report.dashboard=false"]
    out = modelxray.analyze([*args, "quant=quanto_int4", "analyzer.performance.iters=1"], output_dir=tmp_path / "a")
    assert not out.failed and 0 < out.metrics["performance/kl"] and 0.5 < out.metrics["performance/top1_agree"]
    assert out.metrics["quant/effective_bits"] > 4
    strategies = "analyzer.quant_impact.strategies=[none,int4,quanto_int4,hqq_int4]"
    out = modelxray.analyze([*args, "analyzer=[quant_impact]", strategies], output_dir=tmp_path / "b")
    assert not out.failed, out.results["quant_impact"].error
    m = out.metrics
    for s in ("int4", "quanto_int4", "hqq_int4"):
        assert (
            m[f"quant_impact/{s}_kl"] > 0 and m[f"quant_impact/{s}_weight_bytes"] < m["quant_impact/none_weight_bytes"]
        )
    rows = {r["strategy"]: r for r in out.results["quant_impact"].tables["strategies"]}
    assert rows["int4"]["simulated"] and rows["int4"]["speed_measured"] == "float model, shared"
    for s in ("quanto_int4", "hqq_int4"):  # the libraries' modules hold and run the weights: timed on their own
        assert not rows[s]["simulated"] and rows[s]["speed_measured"] == "own"


def test_a_missing_library_is_one_line(monkeypatch):
    import importlib.util

    from modelxray.quant.hqq_backend import HQQQuantizer

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n.startswith("hqq") else real(n, *a))
    with pytest.raises(
        ConfigError,
        match=r"^quant: HQQ 4-bit \(groups of 64\) needs the 'hqq.core.quantize' package: pip install hqq \(extra modelxray\[quantizers\]\)$",
    ):
        HQQQuantizer()
    with pytest.raises(ConfigError, match=r"must be one of 8, 4, 3, 2, 1"):
        HQQQuantizer(bits=5)


def test_torchao_int4_says_where_its_kernels_are_missing(tmp_path):
    pytest.importorskip("torchao")
    from modelxray.quant.torchao_backend import int4_kernels

    why = int4_kernels()
    if why is None:
        pytest.skip("torchao's int4 kernels run here")
    with pytest.raises(ConfigError, match=r"^quant: torchao's int4 weight-only kernels need the mslk package"):
        modelxray.quantize(_gpt2(), "int4_torchao")
    args = ["debug=tiny", "model.n_layer=1", "dataset.max_tokens=512", "dataset.seq_len=64", "report.dashboard=false"]
    strategies = "analyzer.quant_impact.strategies=[none,int4_torchao]"
    out = modelxray.analyze([*args, "analyzer=[quant_impact]", strategies], output_dir=tmp_path)
    (skipped,) = out.results["quant_impact"].tables["unsupported"]
    assert skipped["strategy"] == "int4_torchao" and "mslk" in skipped["reason"]


@pytest.mark.parametrize("option", [*OPTIONS, "int8_torchao"])
def test_weight_statistics_read_the_weight_a_library_computes_with(option):
    """Inspect's tensors of a quantized model are the library's dequantized weights (never packed
    codes), under the layer's weight name and in its shape."""
    from modelxray.models.quantized_weights import dequantized_tensors

    library = OPTIONS.get(option, ("torchao", ""))[0]
    pytest.importorskip(library, reason=f"{library} is not installed")
    quantized, report = modelxray.quantize(_gpt2(), option)
    tensors = dict(dequantized_tensors(quantized))
    for row in report.tables["layers"]:
        module = quantized.get_submodule(row["module"])
        got = tensors[f"{row['module']}.weight"]
        assert got.is_floating_point() and got.numel() == row["elements"]
        assert torch.allclose(got.float(), _dequantized(module).float().reshape(got.shape))
    assert not any(k.endswith(("W_q", "scale", "zero")) for k in tensors)  # HQQ's packed codes are not weights


def test_quantos_cpu_kernels_are_built_before_the_run_times_anything_and_it_says_so(tmp_path, monkeypatch, caplog):
    """quanto compiles its C++ unpacking kernels at their first use in an environment (about a
    minute): int4 and int2 on a CPU build them as they quantize, with a line before and after;
    built ones, int8 and a GPU model build nothing."""
    pytest.importorskip("optimum.quanto")
    import logging

    import optimum.quanto.library.extensions as extensions

    from modelxray.quant import quanto_impl

    class FakeExtension:
        name, build_directory, builds = "quanto_cpp", str(tmp_path), 0

        @property
        def lib(self):
            self.builds += 1
            (tmp_path / "quanto_cpp.so").write_bytes(b"")
            (tmp_path / "pytorch_version.txt").write_text(torch.__version__)

    fake = FakeExtension()
    monkeypatch.setattr(extensions, "get_extension", lambda name: fake)
    model = torch.nn.Linear(4, 4)
    quanto_impl._build_cpu_kernels("int8", model)
    assert fake.builds == 0
    with caplog.at_level(logging.INFO, logger="modelxray.progress"):
        quanto_impl._build_cpu_kernels("int4", model)
    assert fake.builds == 1
    assert "building optimum-quanto's CPU kernels" in caplog.text and "kernels built in" in caplog.text
    quanto_impl._build_cpu_kernels("int2", model)  # built for this torch: nothing to do
    assert fake.builds == 1
    (tmp_path / "pytorch_version.txt").write_text("0.0")  # built for another torch: quanto rebuilds
    quanto_impl._build_cpu_kernels("int4", model)
    assert fake.builds == 2
