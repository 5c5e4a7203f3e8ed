"""Seed 000's custom per-layer bit configs (``[{attn_bits: 8, mlp_bits: 4}, ...]``, one mapping per
block) as a plan form of ``analyzer.bitwidth.custom``: the rules they expand to, the same quantized
weights and metrics as the hand-written rules, one-line errors before any work, YAML files and
override forms, and the two entry points (layer sensitivity alone, custom configurations alone)."""

from __future__ import annotations

import copy
import json

import pytest
import torch
import yaml

from conftest import run_cli
from modelxray.analyzers.bitwidth import BitwidthAnalyzer
from modelxray.analyzers.bitwidth.custom_plans import resolve_rules
from modelxray.analyzers.bitwidth.run import run_custom_configurations, run_layer_sensitivity
from modelxray.core.errors import ConfigError
from modelxray.core.result import RunContext
from modelxray.core.subject import Subject
from modelxray.quant.targets import find_targets
from modelxray.quant.weight import WeightQuantizer, quantize_model

SEED = [{"attn_bits": 8, "mlp_bits": 4}, {"attn_bits": 4, "mlp_bits": 8}]  # seed 000, "Custom Analysis"
# the same plan written as rules (conf/quant/custom.yaml)
RULES = [
    {"blocks": [0], "component": "attention", "bits": 8},
    {"blocks": [0], "component": "mlp", "bits": 4},
    {"blocks": [1], "component": "attention", "bits": 4},
    {"blocks": [1], "component": "mlp", "bits": 8},
]
FAST = dict(uniform_bits=[4], mixed=False, progressive=False, group_size=32, kl_windows=2, recommend=False)


@pytest.fixture(scope="module")
def subject(cache_dir):
    """The tiny GPT-2 of test_bitwidth (2 blocks; random weights: every plan changes its outputs)
    on the first 1,024 tokens of the docs text in 128-token windows."""
    from modelxray.data.pydoc_topics import PydocTopics
    from modelxray.models.tiny_gpt2 import TinyGPT2Source

    loaded = TinyGPT2Source(device="cpu").load()
    data = PydocTopics(seq_len=128, max_tokens=1024, cache_dir=cache_dir).load(loaded.tokenizer)
    return Subject(loaded.model, loaded.tokenizer, data, loaded.info)


def _quantized(model, rules, kinds=("linear", "conv")):
    q = WeightQuantizer(bits=4, group_size=32, targets=list(kinds), rules=rules)
    work = copy.deepcopy(model)
    _, plan = q.plan_for(work)
    quantize_model(find_targets(work), plan)
    return work.state_dict()


def _same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_per_layer_plan_expands_to_the_rules_of_each_block(subject):
    rules = resolve_rules({"seed": SEED, "given": RULES}, subject.model, ["linear", "conv"])
    assert rules["given"] == RULES  # rules stay as written
    assert rules["seed"] == [
        {"name": "transformer.h.0.*", "component": "attention", "kind": "linear", "bits": 8},
        {"name": "transformer.h.0.*", "component": "mlp", "kind": "linear", "bits": 4},
        {"name": "transformer.h.1.*", "component": "attention", "kind": "linear", "bits": 4},
        {"name": "transformer.h.1.*", "component": "mlp", "kind": "linear", "bits": 8},
    ]


def test_per_layer_plan_quantizes_the_same_weights_as_the_rules(subject):
    expanded = resolve_rules({"seed": SEED}, subject.model, ["linear", "conv"])["seed"]
    seed_weights = _quantized(subject.model, expanded)
    assert _same_weights(seed_weights, _quantized(subject.model, RULES))
    swapped = resolve_rules({"s": SEED[::-1]}, subject.model, ["linear", "conv"])["s"]
    assert not _same_weights(seed_weights, _quantized(subject.model, swapped))  # the comparison can fail
    # targets with embeddings and the head: those stay at the default bits in both forms
    kinds = ["linear", "embedding", "lm_head"]
    expanded = resolve_rules({"seed": SEED}, subject.model, kinds)["seed"]
    assert _same_weights(_quantized(subject.model, expanded, kinds), _quantized(subject.model, RULES, kinds))


def test_per_layer_plan_measures_like_the_rules_and_the_entry_points_match_run(subject, tmp_path):
    analyzer = BitwidthAnalyzer(**FAST, sensitivity_windows=2, custom={"seed": SEED, "rules": RULES})
    analyzer.preflight(subject)
    result = analyzer.run(subject, RunContext(output_dir=tmp_path, progress=False))
    rows = {r["config"]: r for r in result.tables["configurations"]}
    seed, rules = rows["custom_seed"], rows["custom_rules"]
    assert {k: v for k, v in seed.items() if k not in ("config", "quantize_seconds")} == {
        k: v for k, v in rules.items() if k not in ("config", "quantize_seconds")
    }
    assert seed["kl"] > 0 and seed["effective_bits"] > rows["uniform_int4"]["effective_bits"]
    assert result.data["custom_rules"]["seed"][0]["name"] == "transformer.h.0.*"

    ctx = RunContext(output_dir=tmp_path, progress=False)
    alone = run_custom_configurations(analyzer, subject, ctx, {"seed": SEED})
    assert [r["config"] for r in alone] == ["custom_seed"]
    keys = set(alone[0]) - {"quantize_seconds"}
    assert {k: alone[0][k] for k in keys} == {k: seed[k] for k in keys}

    sens = run_layer_sensitivity(analyzer, subject, ctx)
    full = result.tables["layer_sensitivity"]
    assert [(r["block"], r["component"], r["rank"]) for r in sens] == [
        (r["block"], r["component"], r["rank"]) for r in full
    ]
    for a, b in zip(sens, full):
        assert a["loss_increase"] == pytest.approx(b["loss_increase"], rel=1e-5, abs=1e-7)
        assert a["kl"] == pytest.approx(b["kl"], rel=1e-5, abs=1e-9)


@pytest.mark.parametrize(
    "custom, error",
    [
        (
            {"p": [{"attn_bits": 8, "mlp_bit": 4}]},
            r"^custom\.p\[0\]\.mlp_bit: unknown per-layer key; valid: attn_bits, mlp_bits",
        ),
        (
            {"p": [{"attn_bits": 8}, {"mlp_bits": 1}]},
            r"^custom\.p\[1\]\.mlp_bits: bits must be an integer from 2 to 16, got 1$",
        ),
        ({"p": [{"attn_bits": 8}, {"attn_bits": "8"}]}, r"^custom\.p\[1\]\.attn_bits: bits must be an integer"),
        ({"p": [{"attn_bits": 8}, 4]}, r"^custom\.p\[1\]: must be a mapping like \{attn_bits: 8, mlp_bits: 4\}"),
        ({"p": {"attn_bits": 8}}, r"^custom\.p: expected a list of rules or of per-layer mappings"),
        ({"p": [{"attn_bits": 8, "blocks": [0]}]}, r"^custom\.p\[0\]\.blocks: unknown per-layer key"),
        ({"p": "missing.yaml"}, r"^custom\.p: no such file: missing\.yaml \(expected a list of rules"),
        ("missing.yaml", r"^custom: no such file: missing\.yaml \(expected a mapping \{name: plan\}"),
        ("[1, 2]", r"^custom: expected a mapping \{name: plan\}"),
        ({"p": "[{attn_bits: 8"}, r"^custom\.p: is not valid YAML"),
    ],
)
def test_bad_plans_fail_in_one_line_when_the_config_is_built(custom, error, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=error) as exc:
        BitwidthAnalyzer(custom=custom)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "plan, error",
    [
        (SEED + [{"attn_bits": 8}], r"custom\.p\[2\]: gives 3 layers, the model has 2 blocks \(h\.0, h\.1\)"),
        (SEED[:1], r"custom\.p: gives 1 layer, the model has 2 blocks \(h\.0, h\.1\): give one mapping like"),
        (
            [{"attn_bits": 8}, {"other_bits": 8}],
            r"custom\.p\[1\]\.other_bits: block h\.1 \(GPT2Block\) has no other modules to quantize; "
            r"its keys: attn_bits, mlp_bits$",
        ),
    ],
)
def test_plans_that_do_not_fit_the_model_fail_in_preflight(subject, tmp_path, plan, error, monkeypatch):
    from modelxray.analyzers.bitwidth import run as bitwidth_run
    from modelxray.app import preflight

    with pytest.raises(ConfigError, match="^analyzer.bitwidth." + error):
        preflight(subject, {"bitwidth": BitwidthAnalyzer(custom={"p": plan})})
    monkeypatch.setattr(bitwidth_run, "_Session", None)  # no work starts: a bad plan fails first
    with pytest.raises(ConfigError, match="^" + error):
        run_custom_configurations(BitwidthAnalyzer(), subject, RunContext(output_dir=tmp_path), {"p": plan})


def _vit():
    """A random-weight 3-layer ViT on 3 x 16 x 16 images, as test_bitwidth_classifier builds it."""
    from transformers import ViTConfig, ViTForImageClassification

    from modelxray.models.hf_vision import PixelClassifier

    torch.manual_seed(0)
    config = ViTConfig(
        image_size=16,
        patch_size=4,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=10,
    )
    net = ViTForImageClassification(config).eval()
    return PixelClassifier(net, [0.5] * 3, [0.25] * 3, (3, 16, 16)).eval()


def test_per_layer_plans_on_a_vit_and_on_a_plain_mlp():
    """A ViT's encoder layers are its blocks; a plain MLP's Linear children are (their component:
    other). Each plan quantizes what its hand-written name rules do."""
    vit = _vit()
    plan = [{"attn_bits": 8}, {"mlp_bits": 8}, {"attn_bits": 6, "mlp_bits": 3}]
    rules = resolve_rules({"v": plan}, vit, ["linear", "conv"])["v"]
    layers = next(n for n, m in vit.named_modules() if isinstance(m, torch.nn.ModuleList))  # by transformers version
    layer = layers + ".{}.*"
    hand = [
        {"name": layer.format(0), "component": "attention", "bits": 8},
        {"name": layer.format(1), "component": "mlp", "bits": 8},
        {"name": layer.format(2), "component": "attention", "bits": 6},
        {"name": layer.format(2), "component": "mlp", "bits": 3},
    ]
    assert [(r["name"], r["component"], r["bits"]) for r in rules] == [
        (r["name"], r["component"], r["bits"]) for r in hand
    ]
    assert _same_weights(_quantized(vit, rules), _quantized(vit, hand))

    mlp = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    rules = resolve_rules({"m": [{"other_bits": 8}, {"other_bits": 3}]}, mlp, ["linear"])["m"]
    assert rules == [
        {"name": "0", "component": "other", "kind": "linear", "bits": 8},
        {"name": "2", "component": "other", "kind": "linear", "bits": 3},
    ]


def test_override_forms_compose_to_the_seed_plan(tmp_path, monkeypatch):
    """What ``modelxray.analyze(overrides)`` composes (no prefix: the default is null, so a mapping
    replaces it) and what the command line composes (``config.overrides.forced_overrides``), files included."""
    from modelxray.api import compose
    from modelxray.config.components import build_components
    from modelxray.config.overrides import forced_overrides
    from modelxray.core.paths import conf_dir

    monkeypatch.chdir(tmp_path)
    (tmp_path / "plans.yaml").write_text(yaml.safe_dump({"my_config": SEED, "rules": RULES}))
    (tmp_path / "layers.yaml").write_text(yaml.safe_dump(SEED))
    seed = {"my_config": SEED}

    def custom(override: str, cli: bool = False) -> dict:
        args = ["debug=tiny", "analyzer=bitwidth", override]
        cfg = compose(forced_overrides(args, conf_dir()) if cli else args)
        return build_components(cfg, skip_model=True, skip_dataset=True).analyzers["bitwidth"].custom

    inline = "analyzer.bitwidth.custom={my_config: [{attn_bits: 8, mlp_bits: 4}, {attn_bits: 4, mlp_bits: 8}]}"
    assert custom(inline) == seed
    assert custom(inline, cli=True) == seed
    assert custom(f'analyzer.bitwidth.custom="{seed}"') == seed  # a Python dict's repr, quoted
    assert custom("analyzer.bitwidth.custom=plans.yaml") == {"my_config": SEED, "rules": RULES}
    assert custom("analyzer.bitwidth.custom.my_config=layers.yaml", cli=True) == seed
    with pytest.raises(ConfigError, match=r"^analyzer\.bitwidth\.custom\.my_config: no such file: nope\.yaml"):
        custom("analyzer.bitwidth.custom.my_config=nope.yaml", cli=True)


@pytest.mark.slow  # a run.py process end to end, about 15 s on a busy 2-core machine
def test_cli_evaluates_a_per_layer_yaml_file_like_its_rules(tmp_path):
    (tmp_path / "layers.yaml").write_text(yaml.safe_dump(SEED))
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(RULES))
    args = [
        "debug=tiny",
        "analyzer=bitwidth",
        "threads=1",
        "report.dashboard=false",
        "analyzer.bitwidth.custom.seed=layers.yaml",
        "analyzer.bitwidth.custom.rules=rules.yaml",
        "analyzer.bitwidth.uniform_bits=[4]",
        "analyzer.bitwidth.mixed=false",
        "analyzer.bitwidth.progressive=false",
        "analyzer.bitwidth.sensitivity=false",
    ]
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = (tmp_path / "outputs").rglob("analysis_results.json")
    rows = {r["config"]: r for r in json.loads(path.read_text())["results"]["bitwidth"]["tables"]["configurations"]}
    for k in ("perplexity", "loss", "kl", "top1_agree", "effective_bits", "model_mb"):
        assert rows["custom_seed"][k] == rows["custom_rules"][k]
    bad = run_cli(["debug=tiny", "analyzer=bitwidth", "analyzer.bitwidth.custom=nope.yaml"], tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1] == (
        "modelxray: error: analyzer.bitwidth.custom: no such file: nope.yaml (expected a mapping {name: plan} "
        "(each plan a list of rules or of per-layer mappings), or a YAML file of one)"
    )


def test_a_classifier_per_layer_plan_and_its_sensitivity_alone(tmp_path):
    """On a classifier (a random ViT on the digits as images): the per-layer plan scores as its rules,
    and the sensitivity alone (reference on the probed examples only) gives run's table."""
    from modelxray.core.subject import ModelInfo
    from modelxray.data.digits import load_digits_split
    from modelxray.data.images import fit_images

    images = fit_images(load_digits_split(0.25, 0), (3, 16, 16), "test")
    subject = Subject(_vit(), None, images, ModelInfo("vit", "config", "float32"), task="classification")
    layers = next(n for n, m in subject.model.named_modules() if isinstance(m, torch.nn.ModuleList))
    hand = [{"name": f"{layers}.1.*", "component": "mlp", "bits": 8}, {"name": f"{layers}.2.*", "bits": 8}]
    analyzer = BitwidthAnalyzer(
        **FAST | {"kl_windows": 8},  # kl_windows: a language-model key, left at its default
        eval_examples=64,
        eval_batch_size=16,
        sensitivity_examples=40,  # not a multiple of the batch: the probe ends inside a batch
        custom={"seed": [{}, {"mlp_bits": 8}, {"attn_bits": 8, "mlp_bits": 8}], "rules": hand},
    )
    analyzer.preflight(subject)
    ctx = RunContext(output_dir=tmp_path, progress=False)
    result = analyzer.run(subject, ctx)
    rows = {r["config"]: r for r in result.tables["configurations"]}
    for k in ("accuracy", "loss", "kl", "top1_agree", "effective_bits"):
        assert rows["custom_seed"][k] == rows["custom_rules"][k]
    sens = run_layer_sensitivity(analyzer, subject, ctx)
    full = result.tables["layer_sensitivity"]
    assert [(r["block"], r["rank"]) for r in sens] == [(r["block"], r["rank"]) for r in full]
    for a, b in zip(sens, full):
        assert a["kl"] == pytest.approx(b["kl"], rel=1e-4, abs=1e-8)
        assert a["accuracy_drop"] == pytest.approx(b["accuracy_drop"], abs=1e-12)
