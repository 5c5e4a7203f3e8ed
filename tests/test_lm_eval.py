"""``analyzer=lm_eval``: lm-eval's tasks on the model as the run holds it, in memory; the offline
Python-documentation pack by default; the same figures as lm-eval's own ``simple_evaluate`` on the
model directory; metrics, per-sample log, table and plot; bad tasks and tokenizers in one line."""

from __future__ import annotations

import pytest

from lm_eval_model import LIMIT, _run, tiny_llama_with_bpe
from modelxray import api
from modelxray.core.errors import ConfigError

pytest.importorskip("lm_eval", reason="analyzer=lm_eval needs lm-eval (extra modelxray[lm_eval])")


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return tiny_llama_with_bpe(tmp_path_factory.mktemp("lm") / "m")


def test_the_offline_tasks_give_lm_evals_own_figures(llama_dir, tmp_path, tracking_uri):
    """The analyzer in memory against lm-eval loading the directory itself: the same acc, acc_norm,
    perplexity and standard errors."""
    from lm_eval import simple_evaluate

    from modelxray.analyzers.lm_eval.offline_tasks import include_dir
    from modelxray.analyzers.lm_eval.tasks_check import _manager

    out = _run(llama_dir, tmp_path, tracking_uri)
    own = simple_evaluate(
        model="hf",
        model_args=f"pretrained={llama_dir},dtype=float32",
        tasks=["pydoc_topic_mc", "pydoc_cloze"],
        limit=LIMIT,
        batch_size=8,
        device="cpu",
        bootstrap_iters=1000,
        task_manager=_manager((str(include_dir()),), False),
        random_seed=0,
        numpy_random_seed=0,
        torch_random_seed=0,
        fewshot_random_seed=0,
    )["results"]
    for task, metric in (
        ("pydoc_topic_mc", "acc"),
        ("pydoc_topic_mc", "acc_norm"),
        ("pydoc_cloze", "acc"),
        ("pydoc_cloze", "perplexity"),
    ):
        assert out.metrics[f"lm_eval/{task}/{metric}"] == pytest.approx(
            own[task][f"{metric},none"], rel=1e-9, abs=1e-12
        )
        assert out.metrics[f"lm_eval/{task}/{metric}_se"] == pytest.approx(own[task][f"{metric}_stderr,none"], rel=1e-9)
    result = out.results["lm_eval"]
    rows = {(r["task"], r["metric"]): r for r in result.tables["tasks"]}
    assert rows[("pydoc_topic_mc", "acc")]["n"] == LIMIT
    assert result.data["chance"]["pydoc_topic_mc"] == pytest.approx(0.25)
    samples = (out.output_dir / "lm_eval_samples.jsonl").read_text().splitlines()
    assert len(samples) == 2 * LIMIT
    assert (out.output_dir / "plots" / "lm_eval_tasks.png").exists()
    report = (out.output_dir / "insights.md").read_text()
    assert f"pydoc_topic_mc: acc {out.metrics['lm_eval/pydoc_topic_mc/acc']:.4g}" in report
    assert "within two standard errors of chance" in report  # a random model answers at random


def test_after_quant_each_task_is_paired_with_the_unquantized_model_by_document(
    llama_dir, tmp_path, tracking_uri, monkeypatch
):
    """The unquantized model's documents are scored before quant= changes it (once per process: a
    sweep's quant=none job already did): each task's change is the mean of per-document differences,
    with their standard error, and the plain runs agree."""
    import json
    import math
    import statistics

    from modelxray.analyzers.lm_eval import run as lm_eval_run

    plain = _run(llama_dir, tmp_path, tracking_uri, "quant=none")
    calls = []
    real = lm_eval_run.evaluate
    monkeypatch.setattr(lm_eval_run, "evaluate", lambda *a, **k: calls.append(1) or real(*a, **k))
    quantized = _run(llama_dir, tmp_path, tracking_uri, "quant=int2")
    assert len(calls) == 1  # the quantized model only: the unquantized one's scores came from the first run
    m = quantized.metrics
    for task, metric in (("pydoc_topic_mc", "acc"), ("pydoc_topic_mc", "acc_norm"), ("pydoc_cloze", "acc")):
        delta = m[f"lm_eval/{task}/{metric}"] - plain.metrics[f"lm_eval/{task}/{metric}"]
        assert m[f"lm_eval/{task}/{metric}_delta"] == pytest.approx(delta, abs=1e-12)

        def scores(out, task=task, metric=metric):
            lines = (out.output_dir / "lm_eval_samples.jsonl").read_text().splitlines()
            return {d["doc_id"]: float(d[metric]) for d in map(json.loads, lines) if d["task"] == task}

        a, b = scores(quantized), scores(plain)
        diffs = [a[d] - b[d] for d in sorted(a)]
        assert m[f"lm_eval/{task}/{metric}_delta_se"] == pytest.approx(statistics.stdev(diffs) / math.sqrt(len(diffs)))
    assert "lm_eval/pydoc_cloze/perplexity_delta" not in m  # a perplexity is no mean over documents
    assert "paired by document" in (quantized.output_dir / "insights.md").read_text()
    assert (
        "### against the unquantized model, paired by document"
        in (quantized.output_dir / "summary_report.md").read_text()
    )
    assert not any(k.endswith("_delta") for k in plain.metrics)


def test_against_another_model_each_task_is_paired_by_document(llama_dir, tmp_path, tracking_uri):
    """reference=: the other model's documents are the baseline (kept in the reference cache)."""
    other = tiny_llama_with_bpe(tmp_path / "other", seed=1)
    vs = _run(llama_dir, tmp_path, tracking_uri, "reference=hf", f"reference.name_or_path={other}")
    alone = _run(other, tmp_path, tracking_uri, "seed=0")
    mine = _run(llama_dir, tmp_path, tracking_uri, "seed=0")
    for metric in ("acc", "acc_norm"):
        delta = mine.metrics[f"lm_eval/pydoc_topic_mc/{metric}"] - alone.metrics[f"lm_eval/pydoc_topic_mc/{metric}"]
        assert vs.metrics[f"lm_eval/pydoc_topic_mc/{metric}_delta"] == pytest.approx(delta, abs=1e-12)
    assert vs.results["lm_eval"].data["baseline"].startswith("the reference")


def test_a_task_of_your_own_from_include_path(llama_dir, tmp_path, tracking_uri):
    import json

    folder = tmp_path / "mine"
    folder.mkdir()
    rows = [{"q": f"Is {i} even?", "choices": ["yes", "no"], "a": i % 2} for i in range(10)]
    (folder / "even.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "even.yaml").write_text(
        "task: even_or_odd\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {folder / 'even.jsonl'}\ntest_split: test\noutput_type: multiple_choice\n"
        'doc_to_text: "{{q}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: "{{a}}"\n'
        "metric_list:\n  - metric: acc\n"
    )
    out = _run(
        llama_dir,
        tmp_path,
        tracking_uri,
        "analyzer.lm_eval.tasks=[even_or_odd]",
        f"analyzer.lm_eval.include_path={folder}",
    )
    assert 0 <= out.metrics["lm_eval/even_or_odd/acc"] <= 1 and "lm_eval/even_or_odd/acc_se" in out.metrics


def test_a_generation_task_with_gen_kwargs_and_the_chat_template(llama_dir, tmp_path, tracking_uri):
    """generate_until tasks decode with gen_kwargs (here 3 new tokens at most); apply_chat_template
    wraps each prompt in the tokenizer's template, as the per-sample log shows."""
    import json

    folder = tmp_path / "gen"
    folder.mkdir()
    rows = [{"q": f"Say {w}:", "a": w} for w in ("class", "def", "import", "return")]
    (folder / "say.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "say.yaml").write_text(
        "task: say_word\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {folder / 'say.jsonl'}\ntest_split: test\noutput_type: generate_until\n"
        'doc_to_text: "{{q}}"\ndoc_to_target: "{{a}}"\ngeneration_kwargs:\n  until: ["\\n"]\n'
        "metric_list:\n  - metric: exact_match\n"
    )
    more = ["analyzer.lm_eval.tasks=[say_word]", f"analyzer.lm_eval.include_path={folder}"]
    out = _run(llama_dir, tmp_path, tracking_uri, *more, "analyzer.lm_eval.gen_kwargs={max_gen_toks: 3}")
    assert 0 <= out.metrics["lm_eval/say_word/exact_match"] <= 1
    samples = [json.loads(line) for line in (out.output_dir / "lm_eval_samples.jsonl").read_text().splitlines()]
    assert samples[0]["arguments"][0][1]["max_gen_toks"] == 3
    chat = _run(llama_dir, tmp_path, tracking_uri, *more, "analyzer.lm_eval.apply_chat_template=true")
    prompt = json.loads((chat.output_dir / "lm_eval_samples.jsonl").read_text().splitlines()[0])["arguments"][0][0]
    assert prompt.startswith("<s>user: Say")


@pytest.mark.parametrize(
    "more,message",
    [
        (
            ["analyzer.lm_eval.tasks=[pydoc_topic_mcq]"],
            r"^analyzer.lm_eval.tasks: unknown lm-eval task 'pydoc_topic_mcq': did you mean pydoc_topic_mc",
        ),
        (
            ["analyzer.lm_eval.include_path=BROKEN"],
            r"^analyzer.lm_eval.include_path: .*bad.yaml is no YAML lm-eval can read \(line 2\)",
        ),
        (["analyzer.lm_eval.tasks=[]"], r"^analyzer.lm_eval.tasks: is empty"),
        (["analyzer.lm_eval.limit=0"], r"^analyzer.lm_eval.limit: must be a count of documents"),
    ],
)
def test_a_bad_task_is_one_line_before_the_model_loads(more, message, llama_dir, tmp_path, monkeypatch):
    from modelxray.models.hf import HFSource

    def never(self):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(HFSource, "load", never)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "bad.yaml").write_text("task: bad\n  output_type: [unclosed\n")
    more = [m.replace("BROKEN", str(broken)) for m in more]
    overrides = ["model=hf", f"model.name_or_path={llama_dir}", "analyzer=lm_eval", "tracker=none", *more]
    with pytest.raises(ConfigError, match=message):
        api.analyze(overrides, output_dir=tmp_path / "run")


def test_a_hub_task_offline_and_not_cached_is_one_line(llama_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "empty"))
    overrides = ["model=hf", f"model.name_or_path={llama_dir}", "analyzer=lm_eval", "analyzer.lm_eval.tasks=[arc_easy]"]
    with pytest.raises(
        ConfigError,
        match=r"^analyzer.lm_eval.tasks: arc_easy: a task's data is on the Hugging Face hub, which cannot be reached",
    ):
        api.analyze([*overrides, "tracker=none"], output_dir=tmp_path / "run")


def test_a_model_without_a_hugging_face_tokenizer_is_one_line(tmp_path):
    with pytest.raises(
        ConfigError, match=r"^analyzer.lm_eval: runs with a Hugging Face tokenizer, and tiny-gpt2.* has ByteTokenizer"
    ):
        api.analyze(["model=tiny_gpt2", "analyzer=lm_eval", "tracker=none"], output_dir=tmp_path / "run")


def test_standard_errors_are_bootstrapped_without_forking_the_run(monkeypatch):
    """lm-eval's bootstrap forks a process pool, which can hang at its end when forked from a run's
    threaded process; the analyzer has lm-eval draw the resamples in the run's own process."""
    import multiprocessing
    import os

    from lm_eval.api import metrics

    from modelxray.analyzers.lm_eval.run import _bootstrap_in_process

    monkeypatch.delenv("DISABLE_MULTIPROC", raising=False)
    monkeypatch.setattr(multiprocessing, "Pool", lambda *a, **k: (_ for _ in ()).throw(AssertionError("forked")))
    xs = [float(i % 7) for i in range(50)]
    with pytest.raises(AssertionError, match="forked"):  # lm-eval's own way
        metrics.bootstrap_stderr(metrics.median, xs, iters=100)
    with _bootstrap_in_process():
        se = metrics.bootstrap_stderr(metrics.median, xs, iters=100)
    assert 0 < se < 3 and "DISABLE_MULTIPROC" not in os.environ
