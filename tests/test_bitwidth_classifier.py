"""The bitwidth analyzer on classifiers: a random-weight Hugging Face ViT and ResNet, the trained
digits MLP and the CLIP-style digits_clip (zero-shot): blocks found per tower, quality against the
unquantized model's own predictions, a configuration checked by hand, and one tracked CLI run."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
import yaml

from conftest import mlflow_runs, run_cli
from modelxray.analyzers.bitwidth import BitwidthAnalyzer
from modelxray.analyzers.bitwidth.blocks import find_blocks
from modelxray.core.errors import ConfigError
from modelxray.core.result import RunContext
from modelxray.core.subject import ModelInfo, Subject
from modelxray.measure.classifier_reference import ClassifierReference
from modelxray.quant.targets import find_targets

QUALITY = ("accuracy", "accuracy_ci_low", "accuracy_ci_high", "loss", "top1_agree", "kl")


def _image_model(net, shape=(3, 16, 16)):
    from modelxray.models.hf_vision import PixelClassifier

    return PixelClassifier(net.eval(), [0.5] * shape[0], [0.25] * shape[0], shape).eval()


def _vit(layers: int = 3):
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(
        image_size=16,
        patch_size=4,
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=10,
    )
    return _image_model(ViTForImageClassification(config))


def _resnet():
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(0)
    config = ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16, 16], depths=[1, 2, 1], layer_type="basic", num_labels=10
    )
    return _image_model(ResNetForImageClassification(config))


def _subject(model, data, name="model", tokenizer=None) -> Subject:
    return Subject(model, tokenizer, data, ModelInfo(name, "config", "float32"), task="classification")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run fastest on one thread (two spin against each other on a busy machine); the
    other test modules get theirs back."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def digits_mlp(one_thread, request):
    """conftest's session ``mlp``, trained on one thread when this module is the first to ask for it."""
    return request.getfixturevalue("mlp")


@pytest.fixture(scope="module")
def images(digits):
    """The digits split as 3 x 16 x 16 images, what the random-weight image models take."""
    from modelxray.data.images import fit_images

    return fit_images(digits, (3, 16, 16), "test")


@pytest.fixture(scope="module")
def clip(one_thread, digits):
    """digits_clip trained briefly (the blocks, towers and zero-shot path matter here, not accuracy),
    bound to the digits' class prompts as the run binds it."""
    from modelxray.models.digits_clip import DigitsCLIPSource

    loaded = DigitsCLIPSource(epochs=2, lr=0.003, use_disk_cache=False, device="cpu").load()
    model = loaded.model.for_classes(digits.meta["class_names"], loaded.tokenizer, digits.meta["prompt_template"])
    return Subject(model, loaded.tokenizer, digits, loaded.info, task="classification")


def _run(subject, tmp_path, **keys):
    analyzer = BitwidthAnalyzer(**keys)
    analyzer.preflight(subject)
    return analyzer.run(subject, RunContext(output_dir=tmp_path, progress=False))


def _rows(result) -> dict[str, dict]:
    return {r["config"]: r for r in result.tables["configurations"]}


def _check_invariants(result):
    ref = result.data["reference"]
    assert ref["top1_agree"] == 1.0 and ref["kl"] == 0.0
    assert ref["accuracy_ci_low"] <= ref["accuracy"] <= ref["accuracy_ci_high"]
    m = result.metrics
    assert m["reference_accuracy"] == ref["accuracy"] and "reference_perplexity" not in m
    for r in result.tables["configurations"]:
        assert r["kl"] >= 0 and 0 <= r["top1_agree"] <= 1 and r["accuracy_ci_low"] <= r["accuracy"]
        for k in QUALITY:
            assert m[f"{r['config']}_{k}"] == r[k]
    assert not any("perplexity" in k for k in m)
    sens = result.tables["layer_sensitivity"]
    assert sorted(r["rank"] for r in sens) == list(range(1, len(sens) + 1))
    assert all(r["kl"] >= 0 for r in sens)
    rec = result.data["recommendation"]
    fits = rec["accuracy_drop"] <= 0.01 and rec["top1_agree"] >= 0.9 and rec["kl"] <= 0.25
    assert rec["within_budget"] == fits == (rec["broken_bounds"] == [])
    assert m["recommended_accuracy"] == rec["accuracy"]
    # insights.md asks the config's hook, which reads the Result alone: the same for a Result reloaded
    # from results/bitwidth.json (a resumed run); the work writes no sentence itself
    said = result.source.insights(result, {})
    assert result.insights == [] and said == result.source.insights(_reloaded(result), {})
    assert said[0].startswith(f"Pareto-optimal configurations (effective bits -> {result.data['quality_metric']}): ")
    assert said[-1].startswith("Memory: The original values of ")


def _reloaded(result):
    import tempfile

    from modelxray.report.result_file import load_result, save_result

    with tempfile.TemporaryDirectory() as out_dir:
        return load_result(save_result(out_dir, "bitwidth", result), source=result.source)


def test_blocks_are_found_by_structure(images, digits_mlp, clip):
    vit = _vit()
    labels = [b.label for b in find_blocks(vit, find_targets(vit))]
    assert labels == ["layers.0", "layers.1", "layers.2", "other"]  # other: patch embedding and head
    resnet = _resnet()
    blocks = find_blocks(resnet, find_targets(resnet))
    assert [b.label for b in blocks] == ["stages.0", "stages.1", "stages.2", "other"]  # stages, not their layers
    assert {t.kind for t in blocks[1].modules} == {"conv"} and blocks[1].type == "ResNetStage"
    blocks = find_blocks(digits_mlp.model, find_targets(digits_mlp.model))  # an nn.Sequential of Linear layers
    assert [(b.label, b.type) for b in blocks] == [("1", "Linear"), ("3", "Linear")]
    blocks = find_blocks(clip.model, find_targets(clip.model))
    assert [b.label for b in blocks] == [
        "text.layers.0",
        "text.layers.1",
        "vision.layers.0",
        "vision.layers.1",
        "text.other",
        "vision.other",
    ]
    other = {t.name for b in blocks if b.label == "vision.other" for t in b.modules}
    assert {"net.visual_projection", "net.vision_model.embeddings.patch_embedding"} <= other


@pytest.mark.parametrize("build", [_vit, _resnet], ids=["vit", "resnet"])
def test_random_weight_hf_image_classifiers(build, images, tmp_path):
    model = build()
    before = copy.deepcopy(model.state_dict())
    subject = _subject(model, images)
    result = _run(
        subject,
        tmp_path,
        uniform_bits=[8, 2],
        progressive_edge=1,
        eval_examples=64,
        sensitivity_examples=32,
        custom={"first_block_8bit": [{"name": "*.0.*", "bits": 8}]},
    )
    _check_invariants(result)
    rows = _rows(result)
    assert rows["uniform_int8"]["kl"] < rows["uniform_int2"]["kl"]
    assert "progressive_4_edges8" in rows and "custom_first_block_8bit" in rows
    assert ("mixed_attn8_mlp4" in rows) == (build is _vit)  # a ResNet has no attention
    # the convolutions are quantized too (the patch embedding; a ResNet's every layer)
    convs = sum(t.module.weight.numel() for t in find_targets(model) if t.kind == "conv")
    assert rows["uniform_int8"]["params_quantized"] > convs > 0
    assert result.data["quality_metric"] == "accuracy" and result.data["reference"]["examples_scored"] == 64
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # the model is untouched


def test_digits_mlp_against_quantizing_by_hand(digits_mlp, digits, tmp_path):
    subject = _subject(digits_mlp.model, digits, "digits-mlp")
    result = _run(subject, tmp_path, uniform_bits=[8, 4, 2], eval_examples=400, sensitivity_examples=200)
    _check_invariants(result)
    rows = _rows(result)
    assert (
        rows["uniform_int8"]["top1_agree"] >= rows["uniform_int4"]["top1_agree"] >= rows["uniform_int2"]["top1_agree"]
    )
    assert rows["uniform_int8"]["kl"] <= rows["uniform_int4"]["kl"] <= rows["uniform_int2"]["kl"]
    assert {s["config"] for s in result.data["skipped_configurations"]} == {
        "mixed_attn8_mlp4",
        "mixed_attn4_mlp8",
        "progressive_4_edges8",
    }  # no attention, and 2 blocks are too few for edges of 2
    assert [(r["block"], r["modules"]) for r in result.tables["layer_sensitivity"]] == [("1", 1), ("3", 1)]

    # int4, symmetric, one fp16 scale per row (64 inputs < group_size 128), by hand
    x, y = digits.x_test[:400], digits.y_test[:400]
    hand = copy.deepcopy(digits_mlp.model)
    with torch.no_grad():
        ref_logits = digits_mlp.model(x)
        for layer in (m for m in hand.modules() if isinstance(m, torch.nn.Linear)):
            w = layer.weight
            scale = (w.abs().amax(dim=1, keepdim=True) / 7).half().float()
            w.copy_(torch.clamp(torch.round(w / scale), -7, 7) * scale)
        logits = hand(x)
    p, q = F.log_softmax(ref_logits, -1), F.log_softmax(logits, -1)
    row = rows["uniform_int4"]
    assert row["accuracy"] == pytest.approx(float((logits.argmax(-1) == y).float().mean()))
    assert row["top1_agree"] == pytest.approx(float((logits.argmax(-1) == ref_logits.argmax(-1)).float().mean()))
    assert row["kl"] == pytest.approx(float((p.exp() * (p - q)).sum(-1).mean()), rel=1e-4, abs=1e-7)
    assert row["loss"] == pytest.approx(float(F.cross_entropy(logits, y)), rel=1e-5)
    assert row["effective_bits"] == pytest.approx((4736 * 4 + 74 * 16) / 4736)  # 64x64 + 10x64 weights, 74 rows

    # the recommended plan is a quant config that reproduces the recommended accuracy
    from omegaconf import OmegaConf

    from modelxray.core.instantiate import build_component

    rec = result.data["recommendation"]
    plan = OmegaConf.create(yaml.safe_load(result.texts["bitwidth_recommended_plan.yaml"]))
    quantized, _ = build_component(plan, "quant").apply(subject)
    with torch.no_grad():
        assert float((quantized.model(x).argmax(-1) == y).float().mean()) == pytest.approx(rec["accuracy"])


def test_reference_scores_itself_and_a_prefix(digits_mlp, digits):
    ref = ClassifierReference(digits_mlp.model, digits, 300, 64)
    m = ref.evaluate(digits_mlp.model)
    assert (
        m["top1_agree"] == 1.0 and m["kl"] == pytest.approx(0.0, abs=1e-7) and m["accuracy"] == ref.metrics["accuracy"]
    )
    probe = ref.evaluate(digits_mlp.model, max_examples=100)
    assert probe["examples_scored"] == 100 and probe["accuracy"] == ref.metrics_of(100)["accuracy"]


def test_digits_clip_per_tower_zero_shot(clip, tmp_path):
    result = _run(
        clip,
        tmp_path,
        uniform_bits=[8, 4],
        eval_examples=128,
        sensitivity_examples=64,
        custom={"vision8": [{"component": "vision", "bits": 8}]},
    )
    _check_invariants(result)
    assert result.data["quality_metric"] == "zero-shot accuracy"
    rows = _rows(result)
    assert rows["uniform_int8"]["top1_agree"] >= rows["uniform_int4"]["top1_agree"]
    assert {"mixed_attn8_mlp4", "custom_vision8"} <= set(rows)
    sens = {r["block"]: r for r in result.tables["layer_sensitivity"]}
    assert {"vision.layers.0", "vision.layers.1", "text.layers.0", "text.layers.1"} <= set(sens)
    assert sens["text.layers.1"]["tower"] == "text" and sens["vision.layers.0"]["tower"] == "vision"
    assert sens["text.layers.0"]["kl"] > 0  # the text tower runs in every forward: its bits show in the logits
    said = result.source.insights(result, {})
    assert any("zero-shot accuracy" in line for line in said)
    assert any(line.startswith("Summed over blocks, the ") and "tower" in line for line in said)
    from modelxray.analyzers.bitwidth import plots

    assert set(plots.figures(result)) == {
        "accuracy_vs_bits.png",
        "bit_width_configurations.png",
        "layer_sensitivity.png",
    }


def test_window_keys_and_bad_rules_fail_in_one_line(digits_mlp, digits):
    subject = _subject(digits_mlp.model, digits, "digits-mlp")
    with pytest.raises(ConfigError, match=r"^kl_windows: applies to language models .* digits-mlp is a classifier"):
        BitwidthAnalyzer(kl_windows=4).preflight(subject)
    with pytest.raises(ConfigError, match=r"^budget_ppl_increase: applies to language models"):
        BitwidthAnalyzer(budget_ppl_increase=0.1).preflight(subject)
    with pytest.raises(ConfigError, match=r"^custom.attn\[0\]: matches no module"):
        BitwidthAnalyzer(custom={"attn": [{"component": "attention", "bits": 8}]}).preflight(subject)
    with pytest.raises(ConfigError, match=r"^targets: \['embedding'\] matches no module of digits-mlp"):
        BitwidthAnalyzer(targets=["embedding"]).preflight(subject)
    with pytest.raises(ConfigError, match=r"^budget_accuracy_drop: must be a fraction"):
        BitwidthAnalyzer(budget_accuracy_drop=5)


@pytest.mark.slow  # a run.py process end to end (the in-process tests cover the numbers)
def test_cli_digits_mlp_is_tracked(tracking_uri, tmp_path):
    args = [
        "model=digits_mlp",
        "dataset=digits",
        "model.epochs=5",
        "analyzer=bitwidth",
        "analyzer.bitwidth.uniform_bits=[8,4,2]",
        "tracker=mlflow",
        f"tracker.uri={tracking_uri}",
        "tracker.experiment=bitwidth_classifier_cli",
        "threads=1",
        "progress=false",
    ]
    proc = run_cli(args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client, runs = mlflow_runs(tracking_uri, "bitwidth_classifier_cli")
    (run,) = runs
    m = run.data.metrics
    assert run.info.status == "FINISHED"
    for key in ("reference_accuracy", "uniform_int4_accuracy", "uniform_int4_kl", "uniform_int2_top1_agree"):
        assert math.isfinite(m[f"bitwidth/{key}"]), key
    assert m["bitwidth/uniform_int8_top1_agree"] >= m["bitwidth/uniform_int2_top1_agree"]
    assert {"bitwidth/recommended_accuracy", "bitwidth/recommended_effective_bits"} <= set(m)
    assert not any("perplexity" in k for k in m)
    plots = {a.path for a in client.list_artifacts(run.info.run_id, "plots")}
    for name in ("accuracy_vs_bits.png", "bit_width_configurations.png", "layer_sensitivity.png"):
        assert f"plots/{name}" in plots, name
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert "bitwidth_recommended_plan.yaml" in artifacts
