"""``runtime.offload=blocks``: a causal LM streamed from its safetensors files one block at a time
gives the in-memory figures (logits bit for bit, perplexity, agreement, the quant report), says why it
streamed and what it read, and refuses what cannot stream in one line before any weight is read."""

from __future__ import annotations

import math

import pytest
import torch

from modelxray import api
from modelxray.core.errors import ConfigError


def _save(model, path, **kwargs):
    model.save_pretrained(path, **kwargs)
    return path


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    """A random 3-layer Llama over the byte tokenizer's ids, saved in several shards."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    return _save(LlamaForCausalLM(config), tmp_path_factory.mktemp("llama") / "m", max_shard_size="100KB")


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    """A random 2-layer GPT-2 whose head is tied to its embeddings (one tensor in the file)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(1)
    config = GPT2Config(vocab_size=300, n_embd=64, n_layer=2, n_head=4, n_positions=256, bos_token_id=0, eos_token_id=0)
    return _save(GPT2LMHeadModel(config), tmp_path_factory.mktemp("gpt2") / "m")


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    """A random 3-layer BERT masked LM with a character-level WordPiece vocabulary."""
    import string

    from transformers import BertConfig, BertForMaskedLM, BertTokenizer

    path = tmp_path_factory.mktemp("bert") / "m"
    path.mkdir()
    chars = string.ascii_lowercase + string.digits
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *string.punctuation, *(f"##{c}" for c in chars)]
    (path / "vocab.txt").write_text("\n".join(vocab))
    BertTokenizer(str(path / "vocab.txt")).save_pretrained(path)
    torch.manual_seed(2)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=256,
    )
    return _save(BertForMaskedLM(config), path)


def _stream(path, hidden_budget=None):
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    from modelxray.models.block_inputs import chain_of_blocks
    from modelxray.models.block_stream import BlockStream
    from modelxray.models.safetensors_dir import SafetensorsDir

    with init_empty_weights(include_buffers=False):
        meta = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    meta.tie_weights()
    return BlockStream(meta.eval(), SafetensorsDir(path), torch.float32, chain_of_blocks(meta), hidden_budget)


@pytest.mark.parametrize("which", ["llama_dir", "gpt2_dir"])
def test_streamed_logits_are_the_in_memory_models_float_and_quantized(which, request):
    """Every batch through every block, hidden states spilled to disk (budget 0), the float path and
    an int4 path (the tied head quantized with its embeddings) together: the same logits, bit for bit."""
    from transformers import AutoModelForCausalLM

    from modelxray.quant.streamed import BlockQuantization
    from modelxray.quant.weight import WeightQuantizer

    path = request.getfixturevalue(which)
    stream = _stream(path, hidden_budget=0)
    quantizer = WeightQuantizer(bits=4, group_size=32, targets=["linear", "conv", "lm_head"])
    quantized_path = BlockQuantization(quantizer, stream.model)
    batches = [torch.randint(0, 300, (2, 16), generator=torch.Generator().manual_seed(i)) for i in range(3)]
    got = {(v, b): logits for v, b, logits in stream.logits(batches, [None, quantized_path])}
    assert all(p.device.type == "meta" for p in stream.model.parameters())  # every block dropped again
    assert stream.stats.spilled_bytes > 0 and stream.stats.passes == 1

    model = AutoModelForCausalLM.from_pretrained(path).eval()
    quantized, report = quantizer.quantize(model)
    with torch.inference_mode():
        for b, ids in enumerate(batches):
            assert torch.equal(got[(0, b)], model(input_ids=ids, use_cache=False).logits)
            assert torch.equal(got[(1, b)], quantized(input_ids=ids, use_cache=False).logits)
    streamed = quantized_path.result(stream.model)
    for key in ("effective_bits", "model_bytes_after", "modules_quantized", "weight_rel_error_mean"):
        assert streamed.metrics[key] == pytest.approx(report.metrics[key], rel=1e-12), key
    # the tied head and embeddings are one tensor: read once per stage, never twice
    assert stream.model_bytes() == sum(p.numel() * 4 for p in {id(p): p for p in model.parameters()}.values())


@pytest.mark.parametrize("method", ["rtn", "gptq"])
def test_quantizing_without_scoring_reads_each_block_once_for_the_same_report(method, llama_dir):
    """With no window to score (no analyzer streamed the model), the blocks still go by once each and
    the report is the in-memory quantizer's, row for row; GPTQ calibrates each block on its inputs."""
    from transformers import AutoModelForCausalLM

    from modelxray.quant.calibration import Calibration
    from modelxray.quant.gptq import GPTQQuantizer
    from modelxray.quant.streamed import block_quantization
    from modelxray.quant.weight import WeightQuantizer

    stream = _stream(llama_dir)
    quantizer = WeightQuantizer(bits=3, group_size=32) if method == "rtn" else GPTQQuantizer(bits=3, group_size=32)
    calibration = Calibration([torch.randint(0, 300, (6, 32), generator=torch.Generator().manual_seed(5))], "test rows")
    path = block_quantization(quantizer, stream, calibration)
    stream.run_transform_only(path)
    embeddings = stream.weights.nbytes(["model.embed_tokens.weight"], 4)  # read for the calibration rows
    assert stream.stats.bytes_read == stream.model_bytes() + (embeddings if method == "gptq" else 0)
    _, report = quantizer.quantize(AutoModelForCausalLM.from_pretrained(llama_dir), calibration)
    assert path.result(stream.model).tables["layers"] == report.tables["layers"]


PERFORMANCE = ["analyzer.performance.speed_batch_sizes=[1]", "analyzer.performance.iters=1"]


def _run(path, tmp_path, tracking_uri, *more):
    chosen = any(m.startswith("analyzer=") for m in more)
    overrides = [
        "model=hf",
        f"model.name_or_path={path}",
        "model.tokenizer=byte",
        "dataset.max_tokens=512",
        "dataset.seq_len=64",
        *([] if chosen else PERFORMANCE),
        "report.dashboard=false",
        "progress=false",
        "tracker=mlflow",
        f"tracker.uri={tracking_uri}",
        "tracker.experiment=block_stream",
        *more,
    ]
    return api.analyze(overrides, output_dir=tmp_path / "_".join(m.replace("/", "") for m in more))


FIGURES = ("perplexity", "loss", "accuracy", "top1_agree", "kl", "kl_p99", "delta_loss", "delta_loss_se")


# AWQ's and HQQ's streamed figures: pytest -m slow (AWQ streams in the quant_impact test below too)
SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "quant", ["none", "int4", "gptq_int4", pytest.param("awq_int4", marks=SLOW), pytest.param("hqq_int4", marks=SLOW)]
)
def test_a_streamed_run_gives_the_in_memory_runs_figures(quant, llama_dir, tmp_path, tracking_uri):
    """GPTQ and AWQ calibrate each block on the windows it sees as the model streams: the same
    calibration, so the same weights and figures as in memory; HQQ swaps each block's layers for its
    own modules as the block is read, and the block's own are put back for the float path."""
    from mlflow.tracking import MlflowClient

    if quant.startswith("hqq"):
        pytest.importorskip("hqq", reason="HQQ is in the extra modelxray[quantizers]")

    more = [f"quant={quant}", "dataset.calibration_windows=8"]
    streamed = _run(llama_dir, tmp_path, tracking_uri, *more, "runtime.offload=blocks")
    whole = _run(llama_dir, tmp_path, tracking_uri, *more, "runtime.offload=none")
    compared = [f for f in FIGURES if f"performance/{f}" in whole.metrics]
    assert ("performance/kl" in whole.metrics) == (quant != "none")
    for figure in compared:
        assert streamed.metrics[f"performance/{figure}"] == pytest.approx(
            whole.metrics[f"performance/{figure}"], rel=1e-6
        )
    if quant != "none":
        for key in ("quant/effective_bits", "quant/model_bytes_after", "quant/weight_rel_error_mean"):
            assert streamed.metrics[key] == pytest.approx(whole.metrics[key], rel=1e-9)
        streamed_rows, whole_rows = (r.results["quant"].tables["layers"] for r in (streamed, whole))
        assert [r["module"] for r in streamed_rows] == [r["module"] for r in whole_rows]
    # every tensor read once: the float and quantized paths share each block's read and the head's
    # (the quantizer leaves the head as stored), and the embeddings are not read again for the logits
    assert streamed.metrics["runtime/weight_reads"] == 1.0
    assert "runtime/weight_reads" not in whole.metrics and "performance/bs1_latency_p50_ms" not in streamed.metrics
    params = MlflowClient(tracking_uri).get_run(streamed.run_id).data.params
    assert params["runtime/offload"] == "blocks" and params["runtime/offload_reason"] == "runtime.offload=blocks"
    report = (streamed.output_dir / "insights.md").read_text()
    assert "Streamed 3 blocks" in report and "Speed and per-module time: not measured" in report


def test_quant_impact_scores_every_strategy_that_streams_in_one_read(llama_dir, tmp_path, tracking_uri):
    """Every strategy is a path of one stream beside the float model: the model is read once for all
    of them, each gets the in-memory figures and size, and a strategy that takes the whole model at
    once (a cast) is listed as unable to run, naming runtime.offload=none."""
    strategies = ["none", "int8", "gptq_int4", "awq_int4", "fp16"]
    more = ["analyzer=quant_impact", f"analyzer.quant_impact.strategies=[{','.join(strategies)}]"]
    more += ["dataset.calibration_windows=8", "analyzer.quant_impact.iters=1"]
    streamed = _run(llama_dir, tmp_path, tracking_uri, *more, "runtime.offload=blocks")
    whole = _run(llama_dir, tmp_path, tracking_uri, *more, "runtime.offload=none")
    for strategy in strategies[:4]:
        for figure in ("perplexity", "loss_se", "kl", "kl_p99", "top1_agree", "delta_loss", "delta_loss_se"):
            key = f"quant_impact/{strategy}_{figure}"
            assert streamed.metrics[key] == pytest.approx(whole.metrics[key], rel=1e-6, abs=1e-12), key
        key = f"quant_impact/{strategy}_weight_bytes"
        assert streamed.metrics[key] == whole.metrics[key], key
    assert streamed.metrics["runtime/weight_reads"] == 1.0
    result = streamed.results["quant_impact"]
    assert result.data["streaming"]["reads"] == 1 and result.data["streaming"]["strategies"] == 4
    (fp16,) = [u for u in result.tables["unsupported"] if u["strategy"] == "fp16"]
    assert fp16["reason"].startswith("cannot stream block by block") and "runtime.offload=none" in fp16["reason"]
    assert math.isnan(streamed.metrics.get("quant_impact/int8_tokens_per_s", math.nan))  # not timed
    report = (streamed.output_dir / "insights.md").read_text()
    assert "scored in 1 read of the model" in report and "nan" not in report
    assert (streamed.output_dir / "plots" / "quant_impact_size_vs_quality.png").exists()


def test_a_strategy_failing_half_way_through_the_stream_loses_no_other(llama_dir, monkeypatch):
    """One strategy's quantizer raising on a block stops that path alone; the others stream on."""
    from modelxray.analyzers.quant_impact.streamed import GuardedPath
    from modelxray.measure.streamed_comparison import score_variants
    from modelxray.metrics.windows import Window
    from modelxray.quant.streamed import BlockQuantization
    from modelxray.quant.weight import WeightQuantizer

    stream = _stream(llama_dir)
    good = GuardedPath(BlockQuantization(WeightQuantizer(bits=8), stream.model))
    bad = GuardedPath(BlockQuantization(WeightQuantizer(bits=4), stream.model))
    calls = []

    def fail(prefix, done):
        calls.append(prefix)
        if prefix == "model.layers.1":
            raise RuntimeError("kernel fault")

    bad.inner.apply = fail
    ids = torch.randint(0, 300, (4, 33), generator=torch.Generator().manual_seed(3))
    windows = [Window(ids[i, :-1], ids[i, 1:]) for i in range(4)]
    other = _stream(llama_dir)
    alone = score_variants(other, windows, 2, 2, [GuardedPath(BlockQuantization(WeightQuantizer(bits=8), other.model))])
    both = score_variants(stream, windows, 2, 2, [bad, good])
    assert "kernel fault" in bad.failure and good.failure is None
    assert "model.layers.2" not in calls  # stopped at its failure
    assert both.comparisons[1].result()["kl"] == alone.comparisons[0].result()["kl"]


def test_bitwidth_streamed_finds_the_in_memory_plans_in_few_reads(llama_dir, tmp_path, tracking_uri):
    """Configurations and sensitivity probes share the first read, the recommendation's search takes
    two levels per read: every figure, the sensitivity ranking and the recommended plan as in memory."""
    more = ["analyzer=bitwidth", "analyzer.bitwidth.uniform_bits=[8,4]"]
    streamed = _run(llama_dir, tmp_path, tracking_uri, *more, "runtime.offload=blocks")
    whole = _run(llama_dir, tmp_path, tracking_uri, *more, "runtime.offload=none")
    keys = [k for k in whole.metrics if k.startswith("bitwidth/") and "seconds" not in k]
    assert len(keys) > 40
    for key in keys:
        assert streamed.metrics[key] == pytest.approx(whole.metrics[key], rel=1e-6, abs=1e-12), key
    a, b = (r.results["bitwidth"] for r in (streamed, whole))
    assert [(r["block"], r["component"], r["rank"]) for r in a.tables["layer_sensitivity"]] == [
        (r["block"], r["component"], r["rank"]) for r in b.tables["layer_sensitivity"]
    ]
    assert a.data["recommendation"]["rules"] == b.data["recommendation"]["rules"]
    # 6 units: the first read (5 configurations, 6 probes), 2 search reads, the confirmation
    assert a.data["streaming"]["reads"] == 4 and streamed.metrics["runtime/stream_passes"] == 4
    assert "plans in 4 reads of the model" in (streamed.output_dir / "insights.md").read_text()


NO_INPUT_FAMILIES = [
    f"analyzer.robustness.{k}=[]" for k in ("fgsm_eps", "pgd_eps", "dropout_rates", "substitution_rates")
]


@pytest.mark.parametrize("targets", ["linear", pytest.param("matrices", marks=SLOW)])
def test_robustness_noise_streams_with_the_in_memory_noise(targets, gpt2_dir, tmp_path, tracking_uri):
    """Every level and seed of weight and quantization noise is a path of one read; each tensor gets
    the noise an in-memory run draws for it (the tied head and embeddings too, with matrices)."""
    more = ["analyzer=robustness", *NO_INPUT_FAMILIES, f"analyzer.robustness.noise_targets={targets}"]
    streamed = _run(gpt2_dir, tmp_path, tracking_uri, *more, "runtime.offload=blocks")
    whole = _run(gpt2_dir, tmp_path, tracking_uri, *more, "runtime.offload=none")
    keys = [k for k in whole.metrics if k.startswith("robustness/") and "seconds" not in k]
    assert any("weight_noise" in k for k in keys) and any("quant_noise" in k for k in keys)
    assert set(keys) <= set(streamed.metrics)
    for key in keys:
        assert streamed.metrics[key] == pytest.approx(whole.metrics[key], rel=1e-5, abs=1e-9), key
    assert streamed.results["robustness"].data["streaming"]["reads"] == 1
    assert "noisy copies (every level and seed) in 1 read" in (streamed.output_dir / "insights.md").read_text()


def test_noise_of_a_tensor_does_not_depend_on_the_others():
    """Each tensor draws from its own generator (the draw's seed and its name): noising a subset, or
    in another order, gives each tensor the noise it gets with all of them."""
    from torch import nn

    from modelxray.perturb.weight_noise import add_gaussian_noise_, noise_targets

    def noised(order):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 4))
        targets = noise_targets(model, "linear")
        add_gaussian_noise_([targets[i] for i in order], 0.1, torch.Generator().manual_seed(7))
        return {t.name: t.param.detach().clone() for t in targets}

    every, reversed_, one = noised([0, 1, 2]), noised([2, 1, 0]), noised([1])
    assert all(torch.equal(every[k], reversed_[k]) for k in every)
    assert torch.equal(every["1.weight"], one["1.weight"]) and not torch.equal(every["0.weight"], one["0.weight"])


def test_bfloat16_streams_as_it_runs_in_memory(llama_dir, tmp_path, tracking_uri):
    """Weights and buffers (rotary frequencies) in the run's dtype, as an in-memory load casts them."""
    more = ["model.dtype=bfloat16", "quant=int8"]
    streamed = _run(llama_dir, tmp_path, tracking_uri, *more, "runtime.offload=blocks")
    whole = _run(llama_dir, tmp_path, tracking_uri, *more, "runtime.offload=none")
    for figure in ("perplexity", "top1_agree", "kl", "delta_loss"):
        key = f"performance/{figure}"
        assert streamed.metrics[key] == pytest.approx(whole.metrics[key], rel=1e-6), key


def test_a_masked_lm_streams_too(bert_dir, tmp_path, tracking_uri):
    """An encoder's chain of blocks streams the same way: masked-token perplexity and int4's agreement
    with the float model as in memory."""
    more = ["quant=int4", "dataset.max_tokens=2048"]
    overrides = [f"model.name_or_path={bert_dir}", "model=hf", "dataset.seq_len=64", *PERFORMANCE, "progress=false"]
    overrides += ["report.dashboard=false", "tracker=mlflow", f"tracker.uri={tracking_uri}", "tracker.experiment=bert"]
    streamed = api.analyze([*overrides, *more, "runtime.offload=blocks"], output_dir=tmp_path / "blocks")
    whole = api.analyze([*overrides, *more, "runtime.offload=none"], output_dir=tmp_path / "none")
    for figure in ("perplexity", "accuracy", "top1_agree", "kl", "delta_loss"):
        key = f"performance/{figure}"
        assert streamed.metrics[key] == pytest.approx(whole.metrics[key], rel=1e-6), key
    assert streamed.metrics["runtime/weight_reads"] >= 1.0


def test_a_hub_model_streams_from_the_local_cache(llama_dir, tmp_path, tracking_uri, monkeypatch):
    """A hub id whose files are in the Hugging Face cache streams from the cached snapshot, offline."""
    import shutil

    cache = tmp_path / "hub"
    snapshot = cache / "models--someorg--tiny-llama" / "snapshots" / ("0" * 40)
    shutil.copytree(llama_dir, snapshot)
    (cache / "models--someorg--tiny-llama" / "refs").mkdir()
    (cache / "models--someorg--tiny-llama" / "refs" / "main").write_text("0" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    out = _run("someorg/tiny-llama", tmp_path, tracking_uri, "runtime.offload=blocks")
    local = _run(llama_dir, tmp_path, tracking_uri, "runtime.offload=blocks")
    assert out.metrics["performance/perplexity"] == local.metrics["performance/perplexity"]
    assert out.metrics["runtime/weight_bytes_read"] == local.metrics["runtime/weight_bytes_read"]


def test_auto_streams_only_when_the_weights_exceed_max_memory(llama_dir, tmp_path, tracking_uri):
    from mlflow.tracking import MlflowClient

    small = _run(llama_dir, tmp_path, tracking_uri, "runtime.max_memory=400KB")  # weights 598 kB, a block 148 kB
    large = _run(llama_dir, tmp_path, tracking_uri, "runtime.max_memory=1GB")
    client = MlflowClient(tracking_uri)
    small_params, large_params = (client.get_run(r.run_id).data.params for r in (small, large))
    assert small_params["runtime/offload"] == "blocks" and large_params["runtime/offload"] == "none"
    assert small_params["runtime/offload_reason"] == (
        "runtime.offload=auto: the weights (583.8 KiB in float32) exceed the memory this run may use "
        "(390.6 KiB: runtime.max_memory)"
    )
    assert "fit the memory this run may use (953.7 MiB: runtime.max_memory)" in large_params["runtime/offload_reason"]
    assert small.metrics["performance/perplexity"] == pytest.approx(large.metrics["performance/perplexity"], rel=1e-6)


@pytest.mark.parametrize(
    "more,message",
    [
        (
            ["analyzer=inspect"],
            r"^runtime.offload: blocks cannot stream this run: analyzer=inspect needs the whole model in memory "
            r"\(analyzer=bitwidth, analyzer=performance, analyzer=quant_impact, analyzer=robustness stream\): use "
            r"runtime.offload=none$",
        ),
        (
            [
                "analyzer=robustness",
                "analyzer.robustness.dropout_rates=[]",
                "analyzer.robustness.substitution_rates=[]",
            ],
            r"^analyzer.robustness.fgsm_eps: fgsm_eps, pgd_eps need the whole model in memory, which a model streamed "
            r"from disk never is \(input attacks a backward pass through it, token perturbations windows of their "
            r"own\): set fgsm_eps=\[\], pgd_eps=\[\] \(weight and quantization noise stream\), or use runtime.offload=none$",
        ),
        (["quant=fp16"], r"^runtime.offload: .*this quantizer \(cast\) works on the whole model at once"),
        (
            ["analyzer=robustness", "quant=int4", *NO_INPUT_FAMILIES],
            r"^analyzer.robustness: streamed from disk, the noise goes on the weights as stored, not on the quantized",
        ),
        (
            ["analyzer=quant_impact", "analyzer.quant_impact.priority=speed"],
            r"^analyzer.quant_impact.priority: a model streamed from disk is not timed",
        ),
        (["train=finetune_lm"], r"^runtime.offload: .*train= needs the whole model in memory"),
        (
            ["runtime.max_memory=100KB"],
            r"^runtime.max_memory: 97.7 KiB is less than one block of the model \(144.5 KiB in float32, "
            r"model.layers.\d\), which a streamed run holds at once: give at least 289.0 KiB$",
        ),
        (["runtime.max_memory=lots"], r"^runtime.max_memory: expected a positive size such as 8GB"),
    ],
)
def test_what_cannot_stream_is_one_line_before_any_weight_is_read(more, message, llama_dir, tmp_path, tracking_uri):
    with pytest.raises(ConfigError, match=message):
        _run(llama_dir, tmp_path, tracking_uri, "runtime.offload=blocks", *more)


def test_auto_refuses_what_exceeds_the_memory_and_cannot_stream_and_says_why(llama_dir, tmp_path, tracking_uri):
    """Under auto (the default) a model too big for max_memory that cannot stream is refused in one
    line saying why it cannot stream (runtime.offload=none holds it anyway); a model whose blocks take
    different masks never streams."""
    import json
    import shutil

    from modelxray.app.offload import choose_offload
    from modelxray.config.components import build_components

    overrides = ["model=hf", f"model.name_or_path={llama_dir}", "model.tokenizer=byte", "runtime.max_memory=400KB"]
    from modelxray.models import process_cache

    components = build_components(api.compose([*overrides, "analyzer=inspect"]))
    process_cache.evict(components.model)  # a model this process held already would be held again
    with pytest.raises(ConfigError) as err:
        choose_offload(components.settings.runtime, components)
    assert str(err.value) == (
        "model: the model holds 583.8 KiB of weights in float32, more than the memory this run may use (390.6 KiB: "
        "runtime.max_memory), and it cannot stream block by block (analyzer=inspect needs the whole model in memory "
        "(analyzer=bitwidth, analyzer=performance, analyzer=quant_impact, analyzer=robustness stream): use "
        "runtime.offload=none); choose a smaller model or dtype, give more memory (runtime.max_memory), or set "
        "runtime.offload=none to hold it in memory anyway"
    )
    components = build_components(api.compose([*overrides, "analyzer=inspect", "runtime.offload=none"]))
    assert choose_offload(components.settings.runtime, components).mode == "none"  # asked for: held anyway
    process_cache.lookup(components.model)  # held by this process: no new memory, so not refused
    held = build_components(api.compose([*overrides, "analyzer=inspect"]))
    choice = choose_offload(held.settings.runtime, held)
    assert choice.mode == "none" and choice.reason.endswith("so it is held")
    process_cache.evict(components.model)
    mixed = tmp_path / "mixed"
    shutil.copytree(llama_dir, mixed)
    config = json.loads((mixed / "config.json").read_text())
    config["layer_types"] = ["full_attention", "sliding_attention", "full_attention"]
    (mixed / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"^runtime.offload: blocks gives every block the first block's attention"):
        _run(mixed, tmp_path, tracking_uri, "runtime.offload=blocks")


def test_a_model_that_is_read_whole_is_one_line_with_blocks(llama_dir, tmp_path, tracking_uri):
    with pytest.raises(ConfigError, match=r"^runtime.offload: blocks reads a Hugging Face causal language model"):
        api.analyze(["debug=tiny", "runtime.offload=blocks"], output_dir=tmp_path / "a")
    pickled = tmp_path / "pickled"  # weights in a .bin checkpoint: not readable one tensor at a time
    pickled.mkdir()
    (pickled / "config.json").write_text((llama_dir / "config.json").read_text())
    (pickled / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(
        ConfigError, match=r"^model.name_or_path: .* holds no safetensors weights .* runtime.offload=none$"
    ):
        _run(pickled, tmp_path, tracking_uri, "runtime.offload=blocks")


def test_the_dashboard_panel_of_a_streamed_run_says_what_it_did_instead_of_empty_axes():
    from matplotlib.figure import Figure

    from modelxray.analyzers.performance.plots import panel
    from modelxray.core.result import Result

    ax = Figure().subplots()
    panel(ax, Result("performance", data={"streaming": {"summary": "Streamed 3 blocks from disk."}}))
    assert [t.get_text() for t in ax.texts] == ["Streamed 3 blocks from disk."] and not ax.axison


def test_a_config_describing_a_model_larger_than_the_machine_is_refused_before_it_is_built(tmp_path):
    """A config.json alone (no weights: built with random weights) naming a ~1.5 TB model: its size is
    counted on the meta device and the run stops in one line before anything is allocated."""
    from transformers import LlamaConfig

    config = LlamaConfig(hidden_size=16384, intermediate_size=53248, num_hidden_layers=100, num_attention_heads=128,
                         vocab_size=128000, architectures=["LlamaForCausalLM"])  # fmt: skip
    config.save_pretrained(tmp_path / "huge")
    with pytest.raises(ConfigError, match=r"^model: the model holds 1\.\d+ TiB of weights in float32, more than the"):
        api.analyze(["model=hf", f"model.name_or_path={tmp_path / 'huge'}", "model.tokenizer=byte", "tracker=none"],
                    output_dir=tmp_path / "out")  # fmt: skip
