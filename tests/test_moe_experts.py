"""Mixture-of-experts layers as transformers 5 stores them: every expert of a fused 3-D tensor
(MixtralExperts.gate_up_proj: experts x out x in; GPT-OSS's transposed, in x out) is quantized as its
own matrix with its own scales, counted in the report, and the run quantizes at least 90% of the
parameters, as a real MoE's experts are most of its weights."""

import pytest
import torch
import transformers as T

from modelxray.quant.rtn import QuantSpec, fake_quantize, packed_bits
from modelxray.quant.targets import find_targets
from modelxray.quant.weight import WeightQuantizer

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
MOE = {
    "mixtral": lambda v: T.MixtralForCausalLM(
        T.MixtralConfig(vocab_size=v, **SMALL, intermediate_size=128, num_local_experts=4, num_experts_per_tok=2)
    ),
    "qwen2_moe": lambda v: T.Qwen2MoeForCausalLM(
        T.Qwen2MoeConfig(
            vocab_size=v,
            **SMALL,
            intermediate_size=64,
            moe_intermediate_size=64,
            shared_expert_intermediate_size=64,
            num_experts=4,
            num_experts_per_tok=2,
        )
    ),  # fmt: skip
    "qwen3_moe": lambda v: T.Qwen3MoeForCausalLM(
        T.Qwen3MoeConfig(
            vocab_size=v,
            **SMALL,
            intermediate_size=64,
            moe_intermediate_size=64,
            num_experts=4,
            num_experts_per_tok=2,
            head_dim=8,
        )
    ),  # fmt: skip
    "gpt_oss": lambda v: T.GptOssForCausalLM(
        T.GptOssConfig(
            vocab_size=v,
            **SMALL,
            intermediate_size=64,
            num_local_experts=4,
            num_experts_per_tok=2,
            head_dim=8,
            layer_types=["full_attention"] * 2,
        )
    ),  # fmt: skip
}


@pytest.mark.parametrize("name", list(MOE))
def test_every_expert_is_quantized_with_its_own_scales_and_counted(name):
    torch.manual_seed(0)
    model = MOE[name](64).eval()
    experts = [t for t in find_targets(model) if t.expert is not None]
    assert len(experts) == 2 * 2 * 4  # two fused tensors (gate/up, down) per layer, four experts each
    originals = {t.name: t.weight_matrix().detach().clone() for t in experts}
    q = WeightQuantizer(bits=4, granularity="group", group_size=16)
    q.validate()
    quantized, result = q.quantize(model)
    spec = QuantSpec(4, True, "group", 16)
    rows = {r["module"]: r for r in result.tables["layers"]}
    for t in find_targets(quantized):
        if t.expert is None:
            continue
        expected = fake_quantize(originals[t.name], spec)  # this expert's matrix alone, (out, in)
        assert torch.equal(t.weight_matrix(), expected), t.name
        assert rows[t.name]["packed_bytes"] == packed_bits(tuple(originals[t.name].shape), spec) / 8
    assert result.metrics["params_quantized_share"] >= 0.9
    if name == "gpt_oss":  # its experts are stored (in, out): an expert's rows are the tensor's columns
        t = experts[0]
        assert t.transposed and t.weight_matrix().shape == t.tensor()[t.expert].t().shape


def test_a_mixtral_directory_with_quant_int8_quantizes_nine_tenths_and_gptq_rounds_its_experts(tmp_path):
    import modelxray

    torch.manual_seed(0)
    config = T.MixtralConfig(vocab_size=300, **SMALL, intermediate_size=256, num_local_experts=4, num_experts_per_tok=2)
    T.MixtralForCausalLM(config).save_pretrained(tmp_path / "mixtral")  # the byte tokenizer's 257 ids fit
    common = [
        "model=hf",
        f"model.name_or_path={tmp_path / 'mixtral'}",
        "model.tokenizer=byte",
        "dataset.max_tokens=1024",
        "dataset.seq_len=64",
        "analyzer=performance",
        "analyzer.performance.iters=1",
        "analyzer.performance.layer_timing=false",
        "analyzer.performance.speed_batch_sizes=[1]",
        "tracker=none",
        "progress=false",
        "report.dashboard=false",
    ]
    out = modelxray.analyze([*common, "quant=int8"], output_dir=tmp_path / "int8")
    quant = out.results["quant"].metrics
    assert quant["params_quantized_share"] >= 0.9 and "performance/top1_agree" in out.metrics
    for method in ("gptq_int4", "awq_int4"):
        out = modelxray.analyze(
            [*common, f"quant={method}", "dataset.calibration_windows=2"], output_dir=tmp_path / method
        )
        quant = out.results["quant"]
        experts = [r for r in quant.tables["layers"] if "experts." in r["module"]]
        calibrated = [r for r in experts if "(RTN" not in r["format"]]
        assert len(experts) == 2 * 2 * 4 and len(calibrated) >= 8, [r["format"] for r in experts]
        assert any("calibrated on the tokens their router sent them" in note for note in quant.insights)
        assert quant.metrics["params_quantized_share"] >= 0.9


def test_each_expert_is_calibrated_on_exactly_the_tokens_routed_to_it():
    """The inputs GPTQ and AWQ see for expert e of a fused tensor are the rows of the MoE layer's input
    whose router chose e (gate/up), and as many rows for its down projection."""
    from modelxray.quant.calibration import _observing

    torch.manual_seed(0)
    model = MOE["mixtral"](64).eval()
    experts_module = model.model.layers[0].mlp.experts
    targets = [t for t in find_targets(model) if t.expert is not None and t.module is experts_module]
    seen, routed = {}, {}

    def keep(name, x, _raw):
        seen.setdefault(name, []).append(x)

    def routing(_m, args, kwargs):
        hidden, top_k = (
            args[0] if args else kwargs["hidden_states"],
            args[1] if len(args) > 1 else kwargs["top_k_index"],
        )
        for e in range(experts_module.num_experts):
            routed[e] = hidden[(top_k == e).any(-1)].float()

    handle = experts_module.register_forward_pre_hook(routing, with_kwargs=True)
    with torch.inference_mode(), _observing(targets, keep):
        model(torch.randint(0, 64, (2, 12)))
    handle.remove()
    for t in targets:
        rows = torch.cat(seen.get(t.name, [torch.zeros(0, 1)]))
        assert rows.shape[0] == routed[t.expert].shape[0], t.name
        if t.param == "gate_up_proj":  # the tokens themselves, in the order the layer took them
            assert torch.equal(rows.sort(0).values, routed[t.expert].sort(0).values), t.name


def test_a_quantizer_that_leaves_much_float_says_so_first_and_the_run_warns(tiny, tmp_path, caplog):
    import logging

    import modelxray

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(1000, 16), torch.nn.Linear(16, 16))
    q = WeightQuantizer(bits=8, granularity="channel", float_share_warn=0.1)
    q.validate()
    _, result = q.quantize(model)
    share = 16000 / (16000 + 16 * 16 + 16)  # the embedding stays float; the Linear's bias too
    assert result.metrics["params_float_share"] == pytest.approx(share, abs=1e-3)
    assert result.insights[0].startswith(f"Warning: {share:.0%} of the parameters were left float")
    q = WeightQuantizer(bits=8, granularity="channel", float_share_warn=0.99)
    q.validate()
    assert not q.quantize(model)[1].insights[0].startswith("Warning")
    with caplog.at_level(logging.WARNING, logger="modelxray"):
        out = modelxray.analyze([*tiny, "quant=int8"], output_dir=tmp_path)
    assert "of the parameters were left float (more than quant.float_share_warn=0.1)" in caplog.text
    assert out.results["quant"].metrics["params_float_share"] > 0.1


@pytest.mark.parametrize("method, quantized", [("hqq_int4", True), ("quanto_int8", False)])
def test_library_quantizers_quantize_experts_where_the_library_can_and_say_so_where_not(method, quantized):
    """HQQ quantizes a bare tensor: each expert through HQQ's own quantizer, with its own groups; quanto
    swaps Linear modules only, so the experts stay float and the report says so (never a crash)."""
    from modelxray.api import compose
    from modelxray.core.instantiate import build_component

    torch.manual_seed(0)
    model = MOE["mixtral"](64).eval()
    experts = [t for t in find_targets(model) if t.expert is not None]
    quantizer = build_component(compose([f"quant={method}"]).quant, "quant")
    out, result = quantizer.quantize(model)
    rows = {r["module"]: r for r in result.tables["layers"]}
    note = next(n for n in result.insights if "experts of fused mixture-of-experts tensors" in n)
    if quantized:
        from hqq.core.quantize import BaseQuantizeConfig, Quantizer

        params = BaseQuantizeConfig(nbits=4, group_size=quantizer.group_size)["weight_quant_params"]
        for t in find_targets(out):
            if t.expert is None:
                continue
            original = next(e for e in experts if e.name == t.name).weight_matrix()
            w_q, meta = Quantizer.quantize(original, device="cpu", compute_dtype=original.dtype, **params)
            assert torch.equal(t.weight_matrix(), Quantizer.dequantize(w_q, meta).reshape(original.shape)), t.name
            assert rows[t.name]["format"].endswith("(fused experts)")
        assert result.metrics["params_quantized_share"] >= 0.9
    else:
        assert "left float" in note and not any(e.name in rows for e in experts)
        assert result.metrics["params_float_share"] > 0.5
