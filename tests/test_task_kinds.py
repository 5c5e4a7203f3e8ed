"""Encoders, seq2seq and speech models through model=hf: the kind comes from transformers' task
tables, each kind scores its own offline examples with a quality figure and its uncertainty, agrees
or not with its unquantized self, and every analyzer runs or refuses in one line."""

import json

import pytest
import torch
import torch.nn.functional as F

import task_models
from conftest import mlflow_runs, run_cli
from modelxray.analyzers.performance.plots import quality_intervals, quality_line
from modelxray.core.errors import ConfigError
from modelxray.kinds.table import kind_of_config
from modelxray.models.hf import HFSource
from report_checks import contradictions

SMALL = ["dataset.examples=8", "dataset.seq_len=48", "progress=false", "report.dashboard=false"]
PERF = [
    "analyzer.performance.iters=1",
    "analyzer.performance.layer_timing_iters=1",
    "analyzer.performance.speed_batch_sizes=[1]",
    "analyzer.performance.generate_examples=3",
    "analyzer.performance.max_new_tokens=6",
]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("kinds")
    out = {}
    for name, build in task_models.ALL.items():
        d = root / name
        d.mkdir()
        out[name] = build(d)
    return out


@pytest.mark.parametrize(
    "arch, kind",
    [
        ("BertForMaskedLM", "masked_lm"),
        ("ModernBertForMaskedLM", "masked_lm"),
        ("BertForSequenceClassification", "sequence_classification"),
        ("RobertaForTokenClassification", "token_classification"),
        ("T5ForConditionalGeneration", "seq2seq_lm"),
        ("MarianMTModel", "seq2seq_lm"),
        ("WhisperForConditionalGeneration", "speech_seq2seq"),
        ("Wav2Vec2ForCTC", "speech_ctc"),
        ("HubertForCTC", "speech_ctc"),
        ("LlamaForCausalLM", "causal_lm"),
        ("ViTForImageClassification", "image_classification"),
    ],
)
def test_the_kind_comes_from_transformers_task_tables(arch, kind):
    from transformers import PretrainedConfig

    assert kind_of_config(PretrainedConfig(architectures=[arch]), arch).name == kind


def test_a_model_of_no_kind_is_one_line_naming_it():
    from transformers import PretrainedConfig

    with pytest.raises(ConfigError, match=r"^model: x \(DetrForSegmentation\) fits no model kind"):
        kind_of_config(PretrainedConfig(architectures=["DetrForSegmentation"]), "x")


KIND_RUNS = {
    # directory: (kind, task, quality metric with its uncertainty, agreement metric)
    "bert_mlm": ("masked_lm", "masked_lm", ("perplexity", "loss_se"), "kl"),
    "bert_classifier": ("sequence_classification", "sequence_classification", ("accuracy", "accuracy_ci_low"), "kl"),
    "bert_token_classifier": ("token_classification", "token_classification", ("accuracy", "accuracy_se"), "kl"),
    "t5": ("seq2seq_lm", "seq2seq_lm", ("chrf", "chrf_se"), "unquantized_chrf"),
    "bart": ("seq2seq_lm", "seq2seq_lm", ("perplexity", "loss_se"), "top1_agree"),
    "whisper": ("speech_seq2seq", "speech_recognition", ("wer", "wer_se"), "unquantized_wer"),
    "wav2vec2_ctc": ("speech_ctc", "speech_recognition", ("wer", "wer_se"), "frame_kl"),
}


@pytest.mark.parametrize("name", list(KIND_RUNS))
def test_every_kind_runs_quantized_with_quality_uncertainty_and_agreement(
    name, dirs, tmp_path, tracking_uri, cache_dir
):
    """What ``python run.py model=hf model.name_or_path=DIR quant=int8`` runs (in process, to keep the
    suite fast; the command line itself is tested on the seq2seq model below)."""
    import modelxray

    kind, task, (quality, error), agreement = KIND_RUNS[name]
    exp = f"kinds_{name}"
    args = [
        "model=hf",
        f"model.name_or_path={dirs[name]}",
        "quant=int8",
        f"dataset.cache_dir={cache_dir}",
        f"tracker.uri={tracking_uri}",
        f"tracker.experiment={exp}",
        *SMALL,
        *PERF,
    ]
    out = modelxray.analyze(args, output_dir=tmp_path)
    perf = out.results["performance"]
    assert perf.data.get("degenerate"), "a random-weight model must be flagged"
    assert not contradictions(perf.metrics, (tmp_path / "insights.md").read_text(), perf.data["degenerate"])
    assert quality_intervals(out.results["performance"]) and quality_line(out.results["performance"])  # plot, line
    _, (run,) = mlflow_runs(tracking_uri, exp)
    assert run.data.tags["modelxray.kind"] == kind and run.data.tags["modelxray.task"] == task
    assert run.info.run_name.endswith(kind)
    metrics = run.data.metrics
    for key in (quality, error, agreement):
        assert f"performance/{key}" in metrics, sorted(metrics)
    assert metrics[f"performance/{error}"] >= 0


def test_every_analyzer_runs_on_a_seq2seq_model(dirs, tmp_path, cache_dir):
    args = [
        "model=hf",
        f"model.name_or_path={dirs['t5']}",
        "analyzer=[performance,quant_impact,bitwidth,inspect]",
        "analyzer.quant_impact.strategies=[none,int8,gptq_int4]",
        "analyzer.bitwidth.max_windows=4",
        "analyzer.bitwidth.sensitivity_windows=2",
        "tracker=none",
        f"dataset.cache_dir={cache_dir}",
        *SMALL,
        *PERF,
    ]
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = (tmp_path / "outputs").rglob("analysis_results.json")
    results = json.loads(path.read_text())["results"]
    assert all(r["ok"] for r in results.values()), {k: r.get("error") for k, r in results.items()}
    qi = results["quant_impact"]
    assert qi["data"]["quality_metric"] == "target perplexity (teacher-forced)"
    assert not qi["tables"]["unsupported"]  # GPTQ calibrates on other denoising pairs
    assert [r["strategy"] for r in qi["tables"]["strategies"]] == ["none", "int8", "gptq_int4"]
    sens = results["bitwidth"]["tables"]["layer_sensitivity"]
    stacks = {row["block"].split(".")[0] for row in sens}
    assert {"encoder", "decoder"} <= stacks, stacks  # blocks of each stack apart


@pytest.mark.parametrize(
    "name, analyzer, message",
    [
        ("wav2vec2_ctc", "quant_impact", r"^analyzer.quant_impact: .* is a CTC speech model"),
        ("wav2vec2_ctc", "bitwidth", r"^analyzer.bitwidth: .* is a CTC speech model"),
    ],
)
def test_an_analyzer_that_does_not_fit_refuses_in_one_line_before_any_work(name, analyzer, message, dirs, cache_dir):
    import modelxray

    args = ["model=hf", f"model.name_or_path={dirs[name]}", f"analyzer={analyzer}", "tracker=none"]
    with pytest.raises(ConfigError, match=message) as info:
        modelxray.analyze([*args, f"dataset.cache_dir={cache_dir}", *SMALL])
    assert "\n" not in str(info.value)


def test_a_directory_without_its_tokenizer_or_feature_extractor_is_one_line(dirs, tmp_path):
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(dirs["bert_mlm"], bare)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (bare / f).unlink()
    with pytest.raises(ConfigError, match=r"^model.tokenizer: .* holds no tokenizer: add tokenizer.json"):
        HFSource(name_or_path=str(bare), device="cpu").load()
    deaf = tmp_path / "deaf"
    shutil.copytree(dirs["whisper"], deaf)
    (deaf / "preprocessor_config.json").unlink()
    with pytest.raises(ConfigError, match=r"^model.name_or_path: .* has no preprocessor_config.json"):
        HFSource(name_or_path=str(deaf), device="cpu").load()


def test_a_dataset_that_does_not_fit_the_kind_is_one_line(dirs, tmp_path, cache_dir):
    args = ["model=hf", f"model.name_or_path={dirs['bert_classifier']}", "dataset=text_files"]
    readme = task_models.__file__.replace("tests/task_models.py", "README.md")
    proc = run_cli([*args, f"dataset.paths=[{readme}]", "tracker=none", *SMALL], tmp_path)
    line = (proc.stderr.strip().splitlines() or [""])[-1]
    assert proc.returncode == 2 and "dataset: text_files has no labels; use dataset=pydoc_topics" in line, line


# -- each metric against an independent computation ---------------------------------------------
def _loaded(dirs, name):
    return HFSource(name_or_path=str(dirs[name]), device="cpu").load()


def test_masked_token_loss_is_the_cross_entropy_of_the_models_logits_at_the_masked_positions(dirs, cache_dir):
    from modelxray.data.text_tasks import masked_windows
    from modelxray.measure.scoring import score_windows

    loaded = _loaded(dirs, "bert_mlm")
    ids = torch.tensor(loaded.tokenizer("the quick brown fox jumps over the lazy dog " * 20)["input_ids"][1:-1])
    data = masked_windows(ids, loaded.tokenizer, 32, 4, 0.15, 0, "text")
    again = masked_windows(ids, loaded.tokenizer, 32, 4, 0.15, 0, "text")
    assert all(torch.equal(a.inputs["input_ids"], b.inputs["input_ids"]) for a, b in zip(data.windows, again.windows))
    score, _ = score_windows(loaded.model, data.windows, 2, [1], progress=False)
    nll, n = 0.0, 0
    for w in data.windows:
        logits = loaded.model(input_ids=w.inputs["input_ids"][None]).logits[0]
        masked = w.inputs["input_ids"] == loaded.tokenizer.mask_token_id
        assert torch.equal(masked, w.targets != -100)  # scored exactly where masked
        nll += float(F.cross_entropy(logits[masked], w.targets[masked], reduction="sum"))
        n += int(masked.sum())
    assert score.result()["loss"] == pytest.approx(nll / n, rel=1e-5)


def test_teacher_forced_target_loss_is_the_models_own_loss_on_the_labels(dirs):
    from modelxray.data.text_tasks import decoder_prompt, seq2seq_windows
    from modelxray.measure.scoring import score_windows

    loaded = _loaded(dirs, "bart")
    pairs = [("the cat sat", "the cat sat on the mat"), ("a dog", "a dog ran in the park today")]
    prompt = decoder_prompt(loaded.model.config, loaded.model.generation_config)
    data = seq2seq_windows(pairs, loaded.tokenizer, prompt, 32, 32, "pairs", "")
    score, _ = score_windows(loaded.model, data.windows, 2, [1], progress=False)
    nll, n = 0.0, 0
    for (src, tgt), w in zip(pairs, data.windows):
        enc = loaded.tokenizer(src, return_tensors="pt")
        labels = loaded.tokenizer(tgt, add_special_tokens=False, return_tensors="pt")["input_ids"]
        assert prompt == [loaded.tokenizer.eos_token_id, loaded.tokenizer.bos_token_id]  # BART's start, forced <s>
        labels = torch.cat([torch.tensor([prompt[1:]]), labels, torch.tensor([[loaded.tokenizer.eos_token_id]])], 1)
        logits = loaded.model(**enc, labels=labels).logits[0]  # transformers shifts the labels behind the start
        # the forced <s> is given, not predicted: scored from the second label on
        nll += float(F.cross_entropy(logits[1:], labels[0, 1:], reduction="sum"))
        n += labels.shape[1] - 1
    assert score.result()["loss"] == pytest.approx(nll / n, rel=1e-5)


def test_greedy_outputs_are_what_transformers_generate_gives(dirs):
    from modelxray.data.text_tasks import decoder_prompt
    from modelxray.measure.generation import greedy_decode

    loaded = _loaded(dirs, "t5")
    enc = loaded.tokenizer(
        ["the object is a data descriptor", "exceptions are raised"], return_tensors="pt", padding=True
    )
    prompt = decoder_prompt(loaded.model.config, loaded.model.generation_config)
    ours = greedy_decode(loaded.model, dict(enc), prompt, loaded.tokenizer.eos_token_id, 8)
    theirs = loaded.model.generate(**enc, do_sample=False, num_beams=1, max_new_tokens=8, min_new_tokens=0)
    for mine, row in zip(ours, theirs.tolist()):
        row = row[len(prompt) :]
        eos = loaded.tokenizer.eos_token_id
        assert mine == (row[: row.index(eos)] if eos in row else row)


def test_word_error_rate_and_its_error_by_hand():
    from modelxray.metrics.text_quality import error_rate, normalize

    refs = ["the cat sat on the mat", "Hello, world!"]
    hyps = ["the cat sit on mat", "hello world"]
    # utterance 1: sat->sit (1 substitution), "the" deleted (1 deletion): 2 edits of 6 words; utterance 2: 0 of 2
    out = error_rate(refs, hyps)
    assert normalize("Hello, world!") == "hello world"
    assert out["wer"] == pytest.approx(2 / 8)
    # ratio estimator over utterances: r = 2/8, residuals 2 - 6r = 0.5 and 0 - 2r = -0.5
    assert out["wer_se"] == pytest.approx((2 / 1 * (0.5**2 + 0.5**2)) ** 0.5 / 8)
    assert error_rate(["a b"], [""])["wer"] == 1.0  # nothing transcribed: every word deleted


def test_chrf_and_bleu_are_sacrebleus_with_a_bootstrap_error():
    import sacrebleu

    from modelxray.metrics.text_quality import generation_scores

    refs = ["the cat sat on the mat", "a dog ran in the park", "it is raining today"]
    hyps = ["the cat sat on a mat", "a dog ran in a park", "it rains today"]
    out = generation_scores(refs, hyps, bootstrap=50)
    assert out["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score)
    assert out["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert out["chrf_se"] > 0
    same = generation_scores(refs, refs, bootstrap=20)
    assert same["chrf"] == pytest.approx(100) and same["chrf_se"] == 0


def test_kl_kept_at_the_scored_positions_only_is_the_full_kl():
    from modelxray.measure.reference import Reference
    from modelxray.metrics.windows import IGNORE, Window

    torch.manual_seed(0)

    class Table(torch.nn.Module):  # logits a fixed function of the token ids
        def __init__(self, scale=1.0):
            super().__init__()
            self.emb = torch.nn.Embedding(20, 7)
            self.scale = scale

        def forward(self, input_ids):
            return self.emb(input_ids) * self.scale

    ref_model, variant = Table(), Table()
    variant.emb.weight.data = ref_model.emb.weight.data + 0.3 * torch.randn(20, 7)
    windows = []
    for i in range(3):
        ids = torch.randint(0, 20, (6,))
        targets = torch.where(torch.rand(6) < 0.5, torch.randint(0, 7, (6,)), torch.full((6,), IGNORE))
        targets[0] = 1
        windows.append(Window(ids, targets))
    ref = Reference(ref_model, windows, batch_size=2, kl_windows=3)
    got = ref.evaluate(variant)["kl"]
    kls = []
    for w in windows:
        p = torch.log_softmax(ref_model(w.inputs), -1)[w.targets != IGNORE]
        q = torch.log_softmax(variant(w.inputs), -1)[w.targets != IGNORE]
        kls.append((p.exp() * (p - q)).sum(-1))
    assert got == pytest.approx(float(torch.cat(kls).mean()), rel=1e-5)


def test_ctc_frame_agreement_of_a_model_with_itself_is_perfect():
    from modelxray.analyzers.performance.tasks import frame_agreement

    logits = [torch.randn(2, 9, 5), torch.randn(1, 9, 5)]
    out = frame_agreement([torch.log_softmax(x, -1) for x in logits], logits)
    assert out["frame_top1_agree"] == 1.0 and out["frame_kl"] == pytest.approx(0.0, abs=1e-7)
    shifted = frame_agreement([torch.log_softmax(x, -1) for x in logits], [x.flip(-1) for x in logits])
    assert shifted["frame_kl"] > 0 and shifted["frame_top1_agree"] < 1


# -- the offline examples --------------------------------------------------------------------------
def test_topic_paragraphs_are_balanced_seeded_and_named():
    from pydoc_data.topics import topics

    from modelxray.data.text_tasks import topic_paragraphs

    texts, labels, names = topic_paragraphs(topics, 4, 40, seed=0)
    again = topic_paragraphs(topics, 4, 40, seed=0)
    assert (texts, labels) == again[:2] and len(names) == 4 and names == sorted(names)
    assert sorted(set(labels)) == [0, 1, 2, 3] and all(labels.count(k) == 10 for k in range(4))


def test_calibration_examples_of_a_text_kind_are_never_evaluated(dirs, cache_dir):
    from modelxray.data.pydoc_topics import PydocTopics
    from modelxray.kinds.table import named
    from modelxray.quant.calibration import subject_calibration
    from modelxray.quant.gptq import GPTQQuantizer

    mlm = _loaded(dirs, "bert_mlm")
    data = named("masked_lm").examples_for(
        PydocTopics(examples=4, seq_len=32, calibration_windows=3, cache_dir=cache_dir), mlm
    )
    ids = mlm.tokenizer(PydocTopics().read_text(), add_special_tokens=False, return_tensors="pt")["input_ids"][0]
    windows, origin = data.calibration_examples()
    shown = windows[0].inputs["input_ids"][1:-1]
    kept = shown != mlm.tokenizer.mask_token_id
    assert len(windows) == 3 and torch.equal(shown[kept], ids[4 * 30 : 5 * 30][kept])  # after the evaluated
    assert origin.startswith("masked windows after the evaluated ones")
    s2s = _loaded(dirs, "t5")
    pairs = named("seq2seq_lm").examples_for(PydocTopics(examples=4, calibration_windows=5, cache_dir=cache_dir), s2s)
    assert len(pairs.calibration_examples()[0]) == 5
    from modelxray.data.text_tasks import denoising_pairs

    text, evaluated = PydocTopics().read_text(), frozenset(pairs.meta["references"])
    assert not {t for _, t in denoising_pairs(text, 200, 0.15, 1, exclude=evaluated)} & evaluated
    subject = type("S", (), {"task": "seq2seq_lm", "data": pairs})()
    cal = subject_calibration(subject, GPTQQuantizer())
    assert cal.kind == "named" and cal.n_rows == 5 and "other passages" in cal.origin


def test_whisper_is_quantized_by_gptq_calibrated_on_other_spoken_sentences(dirs, tmp_path, cache_dir):
    import modelxray

    args = ["model=hf", f"model.name_or_path={dirs['whisper']}", "quant=gptq_int4", "dataset.calibration_windows=3"]
    args += ["analyzer=performance", "tracker=none", f"dataset.cache_dir={cache_dir}", *SMALL, *PERF]
    out = modelxray.analyze(args, output_dir=tmp_path)
    report = next(tmp_path.rglob("insights.md")).read_text()
    assert "GPTQ calibrated on 3 other sentences spoken by espeak-ng" in report, report[:2000]
    assert out.results["performance"].metrics["top1_agree"] > 0


def test_denoising_pairs_drop_words_from_the_source_only():
    from pydoc_data.topics import topics

    from modelxray.data.text_tasks import denoising_pairs

    text = "\n\n".join(topics[k] for k in sorted(topics))
    pairs = denoising_pairs(text, 16, 0.2, seed=3)
    assert pairs == denoising_pairs(text, 16, 0.2, seed=3)
    for src, tgt in pairs:
        kept = src.split()
        assert len(kept) < len(tgt.split()) or len(tgt.split()) < 8
        it = iter(tgt.split())
        assert all(w in it for w in kept)  # the source is the target with words deleted, in order


def test_user_labelled_text_and_pairs_files_and_their_errors(tmp_path):
    from modelxray.data.user_text import LabelledText, TextPairs

    f = tmp_path / "l.csv"
    f.write_text("text,label\nhello there,pos\nawful,neg\n")
    assert LabelledText(path=str(f)).read() == (["hello there", "awful"], ["pos", "neg"])
    j = tmp_path / "p.jsonl"
    j.write_text('{"source": "a", "target": "b"}\n{"source": "c"}\n')
    with pytest.raises(ConfigError, match=r"^dataset.path: .* row 2 has no target or output or summary field"):
        TextPairs(path=str(j)).read()
    with pytest.raises(ConfigError, match=r"^path: file '.*missing.csv' does not exist"):
        LabelledText(path=str(tmp_path / "missing.csv"))


# -- the Python API -----------------------------------------------------------------------------
def test_any_transformers_model_in_memory_is_analyzed_as_its_kind(dirs, tmp_path, cache_dir):
    import modelxray

    loaded = _loaded(dirs, "t5")
    out = modelxray.analyze(
        ["tracker=none", "quant=int8", f"dataset.cache_dir={cache_dir}", *SMALL, *PERF],
        model=loaded.model,
        tokenizer=loaded.tokenizer,
        output_dir=tmp_path / "t5",
    )
    assert "performance/chrf" in out.metrics and "performance/top1_agree" in out.metrics
    speech = _loaded(dirs, "whisper")
    with pytest.raises(ConfigError, match=r"^processor: .* is a speech recogniser: pass its feature extractor"):
        modelxray.analyze(["tracker=none"], model=speech.model, tokenizer=speech.tokenizer)


def test_model_analyzer_scores_a_dataloader_of_the_kinds_own_batches(dirs, tmp_path):
    from modelxray import ModelAnalyzer

    loaded = _loaded(dirs, "bert_classifier")
    enc = loaded.tokenizer(["the cat sat", "a dog ran fast", "it rains", "lists are mutable"], padding=True)
    batches = [
        {"input_ids": torch.tensor(enc["input_ids"][i : i + 2]), "labels": torch.tensor([1, 3][:2])} for i in (0, 2)
    ]
    analyzer = ModelAnalyzer(
        loaded.model, ["analyzer=[performance]", "tracker=none", *PERF], tokenizer=loaded.tokenizer,
        output_dir=tmp_path,
    )  # fmt: skip
    out = analyzer.analyze_performance(batches)
    logits = loaded.model(input_ids=torch.tensor(enc["input_ids"])).logits
    expected = float((logits.argmax(-1) == torch.tensor([1, 3, 1, 3])).float().mean())
    assert out["metrics"]["accuracy"] == pytest.approx(expected) and out["metrics"]["examples_scored"] == 4


def test_a_text_classifier_loader_of_tuples_or_tokenizer_batches_scores_as_its_mappings(dirs):
    """``TensorDataset(input_ids, attention_mask, labels)`` and a tokenizer's ``BatchEncoding`` (no
    dict) give the examples the mappings give; any other shape is one line naming it."""
    from torch.utils.data import DataLoader, TensorDataset

    from modelxray.kinds.table import kind_of

    loaded = _loaded(dirs, "bert_classifier")
    enc = loaded.tokenizer(["the cat sat", "a dog ran fast", "it rains", "lists are mutable"], padding=True,
                           return_tensors="pt")  # fmt: skip
    labels = torch.tensor([1, 3, 1, 3])
    mappings = [{"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": labels}]
    tuples = DataLoader(TensorDataset(enc["input_ids"], enc["attention_mask"], labels), batch_size=4)
    encoding = dict(enc)  # the same keys, then as the BatchEncoding a tokenizer returns
    enc["labels"] = labels
    expected = kind_of(loaded).data_from_batches(loaded, mappings, "dataloader")
    for batches in (tuples, [enc], [{**encoding, "labels": labels}]):
        got = kind_of(loaded).data_from_batches(loaded, batches, "dataloader")
        for w, e in zip(got.windows, expected.windows, strict=True):
            assert set(e.inputs) <= set(w.inputs) and all(torch.equal(w.inputs[k], e.inputs[k]) for k in e.inputs)
        assert [int(w.targets) for w in got.windows] == [1, 3, 1, 3]
    with pytest.raises(ConfigError, match=r"^dataloader: yields lists of 1 item\(s\); a sequence_classification model"):
        kind_of(loaded).data_from_batches(
            loaded, DataLoader(TensorDataset(enc["input_ids"]), batch_size=2), "dataloader"
        )


def test_empty_greedy_outputs_are_flagged_and_never_scored_as_differing(dirs, tmp_path, cache_dir):
    """A seq2seq model that answers every source with end-of-sequence: its outputs are all empty, so
    it is degenerate; quantized, its outputs still equal the unquantized model's (both empty), and no
    chrF of 0 says they differ."""
    from transformers import BartForConditionalGeneration

    import modelxray

    model = BartForConditionalGeneration.from_pretrained(dirs["bart"])
    with torch.no_grad():
        model.final_logits_bias[0, model.config.eos_token_id] = 30.0  # end-of-sequence first, always
    d = tmp_path / "mute"
    model.save_pretrained(d)
    for f in dirs["bart"].iterdir():
        if "token" in f.name or f.name.endswith((".txt", ".model")) or f.name == "vocab.json":
            (d / f.name).write_bytes(f.read_bytes())
    args = ["model=hf", f"model.name_or_path={d}", "quant=int8", f"dataset.cache_dir={cache_dir}", "tracker=none",
            "analyzer=performance", *SMALL, *PERF]  # fmt: skip
    out = modelxray.analyze(args, output_dir=tmp_path / "out")
    perf = out.results["performance"]
    m = perf.metrics
    assert m["empty_output_share"] == 1 and m["unquantized_exact_match"] == 1 and m["unquantized_both_empty"] == 3
    assert "unquantized_chrf" not in m  # nothing to compare between two empty outputs
    assert any("greedy outputs are empty for all 3" in sign for sign in perf.data["degenerate"])
    insights = (tmp_path / "out" / "insights.md").read_text()
    assert "both models' outputs are empty for all 3 examples" in insights
    assert not contradictions(m, insights, perf.data["degenerate"])
