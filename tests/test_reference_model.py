"""reference=: the model a run compares with. A language model against another model file on the
same windows (KL with its percentiles, top-1 agreement, paired loss change) equals a hand
computation over the two models' logits; the reference's outputs are computed once and read back
from the cache; a quantized model is compared with itself before quant=; bad use is one line."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

import modelxray
from modelxray.core.errors import ConfigError

SEQ, TOKENS, KL_WINDOWS = 64, 512, 3
FAST = [
    "tracker=none",
    "progress=false",
    "analyzer=[performance]",
    f"dataset.max_tokens={TOKENS}",
    f"dataset.seq_len={SEQ}",
    f"analyzer.performance.kl_windows={KL_WINDOWS}",
    "analyzer.performance.iters=1",
    "analyzer.performance.speed_batch_sizes=[1]",
    "analyzer.performance.layer_timing=false",
    "report.dashboard=false",
]


def _gpt2(seed: int) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=257, n_positions=SEQ)
    return GPT2LMHeadModel(config).eval()


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A model directory and a second one: the same weights with noise (a "quantized" variant)."""
    root = tmp_path_factory.mktemp("reference_pair")
    base = _gpt2(0)
    base.save_pretrained(root / "base")
    variant = _gpt2(0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in variant.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g))
    variant.save_pretrained(root / "variant")
    return root / "base", root / "variant", base, variant


def _tokens() -> torch.Tensor:
    """The run's tokens: the default text through the byte tokenizer (no file is cached for it)."""
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[k] for k in sorted(topics))
    return torch.tensor(list(text.encode("utf-8")[:TOKENS]), dtype=torch.long)


def _by_hand(reference, model) -> dict[str, float]:
    """The statistics over disjoint windows of SEQ tokens, each scoring its tokens 2..SEQ."""
    ids = _tokens().view(-1, SEQ)
    with torch.no_grad():
        lp = F.log_softmax(reference(ids).logits[:, :-1].double(), -1)
        lq = F.log_softmax(model(ids).logits[:, :-1].double(), -1)
    target = ids[:, 1:]
    kl = (lp.exp() * (lp - lq)).sum(-1)[:KL_WINDOWS].flatten()
    nll_p = -lp.gather(-1, target[..., None]).squeeze(-1)
    nll_q = -lq.gather(-1, target[..., None]).squeeze(-1)
    return {
        "kl": float(kl.mean()),
        "kl_p99": float(torch.quantile(kl, 0.99)),
        "kl_max": float(kl.max()),
        "top1_agree": float((lp.argmax(-1) == lq.argmax(-1)).double().mean()),
        "delta_loss": float((nll_q - nll_p).mean()),
        "reference_loss": float(nll_p.mean()),
    }


def test_a_model_file_against_a_reference_file_equals_the_hand_computation(pair, tmp_path):
    base_dir, variant_dir, base, variant = pair
    out = modelxray.analyze(
        [
            *FAST,
            "model=file",
            f"model.path={variant_dir}",
            "reference=file",
            f"reference.path={base_dir}",
            f"runtime.reference_cache_dir={tmp_path / 'cache'}",
        ],
        output_dir=tmp_path / "run",
    )
    assert not out.failed, out.results["performance"].error
    m, want = out.metrics, _by_hand(base, variant)
    for key, value in want.items():
        assert m[f"performance/{key}"] == pytest.approx(value, rel=1e-4, abs=1e-7), key
    assert m["performance/ppl_ratio"] == pytest.approx(math.exp(want["delta_loss"]), rel=1e-6)
    assert 0 < m["performance/kl_se"] < m["performance/kl"] and m["performance/delta_loss_se"] > 0
    vs = out.results["performance"].data["quality"]["vs_reference"]
    assert vs["reference"].startswith("the reference ") and vs["kl_windows"] == KL_WINDOWS
    (said,) = [s for s in out.results["performance"].sentences() if s.startswith("Against the reference")]
    assert f"same {TOKENS // SEQ} windows" in said and f"the first {KL_WINDOWS} windows" in said


def test_the_reference_is_scored_once_and_read_back_until_its_file_changes(pair, tmp_path, monkeypatch):
    from modelxray.app import reference_model

    base_dir, variant_dir, _, _ = pair
    captured = []
    real = reference_model._capture
    monkeypatch.setattr(reference_model, "_capture", lambda *a, **k: captured.append(1) or real(*a, **k))
    args = [
        *FAST,
        "model=file",
        f"model.path={variant_dir}",
        "reference=file",
        f"reference.path={base_dir}",
        f"runtime.reference_cache_dir={tmp_path / 'cache'}",
    ]
    first = modelxray.analyze(args, output_dir=tmp_path / "a").metrics
    second = modelxray.analyze(args, output_dir=tmp_path / "b").metrics
    assert len(captured) == 1 and second["performance/kl"] == first["performance/kl"]
    assert second["performance/delta_loss"] == first["performance/delta_loss"]
    weights = base_dir / "model.safetensors"
    weights.touch()  # a changed file is another reference
    modelxray.analyze(args, output_dir=tmp_path / "c")
    assert len(captured) == 2


def test_the_same_file_as_its_own_reference_changes_nothing(pair, tmp_path):
    base_dir, _, _, _ = pair
    args = ["model=file", f"model.path={base_dir}", "reference=file", f"reference.path={base_dir}"]
    m = modelxray.analyze([*FAST, *args, "runtime.reference_cache_dir=null"], output_dir=tmp_path).metrics
    assert m["performance/kl"] == pytest.approx(0.0, abs=1e-9) and m["performance/top1_agree"] == 1.0
    assert m["performance/delta_loss"] == pytest.approx(0.0, abs=1e-9) and m["performance/ppl_ratio"] == 1.0


def test_a_quantized_language_model_is_compared_with_itself_before_quant(tmp_path):
    args = ["model=tiny_gpt2", "model.n_layer=1", "quant=int4", f"runtime.reference_cache_dir={tmp_path / 'c'}"]
    out = modelxray.analyze([*FAST, *args], output_dir=tmp_path / "run")
    m = out.metrics
    assert 0 < m["performance/kl"] and 0.5 < m["performance/top1_agree"] <= 1.0
    assert m["performance/ppl_ratio"] == pytest.approx(math.exp(m["performance/delta_loss"]))
    vs = out.results["performance"].data["quality"]["vs_reference"]
    assert vs["reference"] == "the unquantized model"
    said = out.results["performance"].sentences(out.results)
    assert any(s.startswith("Against the unquantized model on the same 8 windows") for s in said)
    assert not any("has no unquantized score" in s for s in said)
    plain = modelxray.analyze([*FAST, "model=tiny_gpt2", "model.n_layer=1"], output_dir=tmp_path / "none").metrics
    assert "performance/kl" not in plain  # nothing to compare with without quant= or reference=


def test_a_reference_without_the_analyzer_that_compares_is_one_line(pair, tmp_path):
    base_dir, _, _, _ = pair
    args = ["tracker=none", "analyzer=[robustness]", "model=tiny_gpt2", "reference=file", f"reference.path={base_dir}"]
    with pytest.raises(ConfigError, match=r"^reference: is compared with by analyzer=performance \(outputs\)"):
        modelxray.analyze(args, output_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"^reference.path: is required"):
        modelxray.analyze(["tracker=none", "model=tiny_gpt2", "reference=file"], output_dir=tmp_path)


def test_a_reference_scored_on_other_tokens_is_one_line():
    from modelxray.app.reference_model import ReferenceOutputs, check_against
    from modelxray.measure.reference import Reference
    from modelxray.metrics.windows import make_windows

    model = _gpt2(0)
    ids = _tokens()
    ref = Reference(model, make_windows(ids, SEQ, "disjoint", None, None), 4, 1)
    other = make_windows(ids.flip(0), SEQ, "disjoint", None, None)
    assert ref.same_tokens(make_windows(ids, SEQ, "disjoint", None, None)) is None
    assert "token ids differ in batch 0 (first at token" in ref.same_tokens(other)

    class Subject:
        task, batches, tokenizer = "causal_lm", None, None
        info = type("Info", (), {"name": "variant"})()
        data = type("Data", (), {"ids": ids.flip(0), "seq_len": SEQ})()

    class Performance:
        stride, prefix_token, protocol = None, "none", "disjoint"

    with pytest.raises(ConfigError, match=r"^reference: the reference base was scored on other tokens than variant"):
        check_against(ReferenceOutputs("causal_lm", ref, "reference base", None), Subject(), Performance())


@pytest.fixture(scope="module")
def cnns(tmp_path_factory):
    """Two small TorchScript CNNs of the digits' 10 classes, from different seeds."""
    root = tmp_path_factory.mktemp("reference_cnns")
    for seed in (0, 1):
        torch.manual_seed(seed)
        net = torch.nn.Sequential(
            torch.nn.Unflatten(1, (1, 8, 8)),  # the digits' 64 features as one 8x8 image
            torch.nn.Conv2d(1, 4, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Flatten(),
            torch.nn.Linear(256, 10),
        ).eval()
        torch.jit.save(torch.jit.trace(net, torch.zeros(1, 64)), root / f"cnn{seed}.pt")
    return root


def _classifier(path, reference, tmp_path):
    args = ["model=file", f"model.path={path}", "model.input_shape=[1,8,8]", "dataset=digits"]
    args += ["reference=file", f"reference.path={reference}", "reference.input_shape=[1,8,8]"]
    fast = [o for o in FAST if not o.startswith(("dataset.", "analyzer.performance.kl_windows"))]
    out = modelxray.analyze([*fast, *args, "runtime.reference_cache_dir=null"], output_dir=tmp_path)
    assert not out.failed, out.results["performance"].error
    return out.metrics


def test_a_classifier_against_a_reference_file_is_paired_by_test_example(cnns, tmp_path):
    a, b = cnns / "cnn0.pt", cnns / "cnn1.pt"
    same = _classifier(a, a, tmp_path / "same")
    assert same["performance/top1_agree"] == 1.0 and same["performance/kl"] == pytest.approx(0.0, abs=1e-9)
    assert same["performance/delta_accuracy"] == 0.0
    ab, ba = _classifier(a, b, tmp_path / "ab"), _classifier(b, a, tmp_path / "ba")
    assert ab["performance/top1_agree"] == ba["performance/top1_agree"] < 1.0  # agreement is symmetric
    assert ab["performance/delta_accuracy"] == pytest.approx(-ba["performance/delta_accuracy"])
    assert ab["performance/unquantized_accuracy"] == pytest.approx(ba["performance/accuracy"])  # the reference's
    assert ab["performance/kl"] > 0 and ba["performance/kl"] > 0


def test_the_weights_fingerprint_tells_another_training_apart():
    from modelxray.app.reference_model import weights_fingerprint

    a, b = _gpt2(0), _gpt2(0)
    assert weights_fingerprint(a) == weights_fingerprint(b)
    with torch.no_grad():
        b.transformer.h[0].mlp.c_fc.weight[0, 0] += 1e-3
    assert weights_fingerprint(a) != weights_fingerprint(b)


def test_a_reference_cache_that_cannot_be_written_loses_nothing_of_the_run(tmp_path, monkeypatch):
    from modelxray.app import reference_model

    def full(path, content):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(reference_model, "write_file", full)
    args = ["model=tiny_gpt2", "model.n_layer=1", "quant=int4", f"runtime.reference_cache_dir={tmp_path / 'c'}"]
    out = modelxray.analyze([*FAST, *args], output_dir=tmp_path / "run")
    assert not out.failed and out.metrics["performance/kl"] > 0


@pytest.fixture(scope="module")
def mlm_pair(tmp_path_factory):
    """A tiny BERT masked LM directory and a noised copy, each with its tokenizer."""
    import shutil

    from transformers import BertForMaskedLM

    import task_models

    root = tmp_path_factory.mktemp("mlm_pair")
    (root / "base").mkdir()
    base = task_models.bert_mlm(root / "base")
    shutil.copytree(base, root / "variant")
    variant = BertForMaskedLM.from_pretrained(root / "variant")
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in variant.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    variant.save_pretrained(root / "variant")
    return base, root / "variant"


def test_a_masked_lm_against_a_reference_directory_on_the_same_masked_tokens(mlm_pair, tmp_path, cache_dir):
    base, variant = mlm_pair
    small = ["dataset.examples=8", "dataset.seq_len=48", f"dataset.cache_dir={cache_dir}"]
    args = [*FAST[:2], "analyzer=[performance]", *small, "analyzer.performance.iters=1"]
    args += ["analyzer.performance.layer_timing=false", "report.dashboard=false", "runtime.reference_cache_dir=null"]
    same = modelxray.analyze(
        [*args, "model=hf", f"model.name_or_path={base}", "reference=hf", f"reference.name_or_path={base}"],
        output_dir=tmp_path / "same",
    ).metrics
    assert same["performance/kl"] == pytest.approx(0.0, abs=1e-9) and same["performance/top1_agree"] == 1.0
    moved = modelxray.analyze(
        [*args, "model=hf", f"model.name_or_path={variant}", "reference=hf", f"reference.name_or_path={base}"],
        output_dir=tmp_path / "moved",
    ).metrics
    assert moved["performance/kl"] > 0 and moved["performance/top1_agree"] < 1.0
    assert moved["performance/delta_loss_se"] > 0


def test_inspect_lists_each_weight_against_the_reference_file(pair, tmp_path):
    base_dir, variant_dir, base, variant = pair
    args = [
        *(o for o in FAST if not o.startswith("analyzer")),  # inspect alone: the reference's weights, no outputs
        "analyzer=[inspect]",
        "analyzer.inspect.compute=false",
        "runtime.reference_cache_dir=null",
    ]
    args += ["model=file", f"model.path={variant_dir}", "reference=file", f"reference.path={base_dir}"]
    out = modelxray.analyze(args, output_dir=tmp_path)
    assert not out.failed, {n: r.error for n, r in out.results.items() if not r.ok}
    inspect = out.results["inspect"]
    rows = {r["name"]: r for r in inspect.data["reference_differences"]["tensors"]}
    name = "transformer.h.0.mlp.c_fc.weight"
    a, b = variant.get_parameter(name).detach().double(), base.get_parameter(name).detach().double()
    assert rows[name]["rel_diff"] == pytest.approx(float((a - b).norm() / b.norm()), rel=1e-6)
    assert rows[name]["max_abs_diff"] == pytest.approx(float((a - b).abs().max()), rel=1e-6)
    assert inspect.metrics["reference_tensors_compared"] == len(dict(base.named_parameters()))  # lm_head is tied: once
    said = [s for s in inspect.sentences(out.results) if s.startswith("Against the reference")]
    assert said and "tensors compared by name" in said[0]


def test_quant_impact_and_bitwidth_take_the_reference_as_their_baseline(pair, tmp_path):
    """With reference=, quant_impact's and bitwidth's baseline is the reference on their own windows:
    "none" (the model as loaded) is then compared with it too, by the same hand computation."""
    base_dir, variant_dir, base, variant = pair
    common = [
        "tracker=none", "progress=false", f"dataset.max_tokens={TOKENS}", f"dataset.seq_len={SEQ}", "report.dashboard=false",
        "model=file", f"model.path={variant_dir}", "reference=file", f"reference.path={base_dir}",
        f"runtime.reference_cache_dir={tmp_path / 'cache'}",
    ]  # fmt: skip
    qi = [
        "analyzer=[quant_impact]", "analyzer.quant_impact.strategies=[none,int8]", "analyzer.quant_impact.eval_windows=8",
        f"analyzer.quant_impact.kl_windows={KL_WINDOWS}", "analyzer.quant_impact.iters=1",
    ]  # fmt: skip
    out = modelxray.analyze([*common, *qi], output_dir=tmp_path / "qi")
    assert not out.failed, out.results["quant_impact"].error
    rows = {r["strategy"]: r for r in out.results["quant_impact"].tables["strategies"]}
    want = _by_hand(base, variant)
    for key in ("kl", "top1_agree", "delta_loss"):
        assert rows["none"][key] == pytest.approx(want[key], rel=1e-4, abs=1e-7), key
    assert rows["int8"]["kl"] > 0 and abs(rows["int8"]["kl"] - rows["none"]["kl"]) < rows["none"]["kl"]
    assert out.results["quant_impact"].data["baseline"].startswith("the reference ")
    plain = modelxray.analyze([a for a in common if not a.startswith("reference")] + qi, output_dir=tmp_path / "plain")
    assert {r["strategy"]: r for r in plain.results["quant_impact"].tables["strategies"]}["none"]["kl"] == 0.0

    bw = ["analyzer=[bitwidth]", "analyzer.bitwidth.uniform_bits=[8]", f"analyzer.bitwidth.kl_windows={KL_WINDOWS}"]
    bw += [
        "analyzer.bitwidth.mixed=false",
        "analyzer.bitwidth.progressive=false",
        "analyzer.bitwidth.sensitivity=false",
    ]
    bw += ["analyzer.bitwidth.recommend=false"]
    out = modelxray.analyze([*common, *bw], output_dir=tmp_path / "bw")
    assert not out.failed, out.results["bitwidth"].error
    reference = out.results["bitwidth"].data["reference"]
    assert reference["loss"] == pytest.approx(
        want["reference_loss"], rel=1e-5
    )  # the reference's loss, not the variant's


def test_a_baseline_reference_on_another_kind_is_one_line(cnns, tmp_path):
    args = [
        "tracker=none",
        "model=file",
        f"model.path={cnns / 'cnn0.pt'}",
        "model.input_shape=[1,8,8]",
        "dataset=digits",
    ]
    args += ["reference=file", f"reference.path={cnns / 'cnn1.pt'}", "reference.input_shape=[1,8,8]"]
    with pytest.raises(
        ConfigError,
        match=r"^reference: quant_impact takes reference= as its baseline for language models; for a classification",
    ):
        modelxray.analyze([*args, "analyzer=[quant_impact]", "runtime.reference_cache_dir=null"], output_dir=tmp_path)
