"""scripts/compare_runs.py with errors: value ± error in the table, and which runs cannot be told
apart from the baseline (or the best run) on a metric, with the tokens or examples scored."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO, load_script
from modelxray.tracking.mlflow_tracker import MlflowTracker

# perplexity (its error, tokens scored) and accuracy with a 95% interval only (examples scored)
POINTS = {
    "none": {"ppl": (18.0, 0.4), "acc": (0.960, 0.938, 0.975)},
    "int8": {"ppl": (18.5, 0.3), "acc": (0.955, 0.932, 0.971)},
    "int4": {"ppl": (29.8, 0.6), "acc": (0.900, 0.870, 0.925)},
    "int2": {"ppl": (900.0, None), "acc": None},  # an older run: no error logged
}


@pytest.fixture(scope="module")
def compare():
    return load_script("compare_runs")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('cmp') / 'm.db'}"
    tracker = MlflowTracker(uri=uri, experiment="cmp")
    for quant, p in POINTS.items():
        run = tracker.start(quant, {})
        run.log_params({"quant": quant})
        ppl, se = p["ppl"]
        metrics = {"performance/perplexity": ppl, "performance/tokens_scored": 8160.0}
        if se is not None:
            metrics["performance/perplexity_se"] = se
        if p["acc"]:
            acc, low, high = p["acc"]
            metrics.update(
                {
                    "classify/accuracy": acc,
                    "classify/accuracy_ci_low": low,
                    "classify/accuracy_ci_high": high,
                    "classify/examples_scored": 450.0,
                }
            )
        run.log_metrics(metrics)
        run.finish("FINISHED")
    return uri


def _rows(text: str) -> dict[str, str]:
    return {
        line.split("|")[2].strip(): line for line in text.splitlines() if line.startswith("| ") and "---" not in line
    }


def test_values_carry_their_errors_and_the_runs_within_them_are_named(store, compare):
    text = compare.table(store, "cmp", ["quant"], ["performance/perplexity*", "classify/accuracy*"])
    head = text.splitlines()[0]
    assert "performance/perplexity_se" not in head and "classify/accuracy_ci_low" not in head  # shown in the cell
    rows = _rows(text)
    assert "| 18.5 ± 0.3 |" in rows["int8"] and "| 0.955 [0.932, 0.971] |" in rows["int8"]
    assert "| 900 | - |" in rows["int2"]  # no error logged: the value alone
    # int8 - none = +0.5, se sqrt(0.3^2 + 0.4^2) = 0.5: within 2 se; int4: +11.8 +- 0.72, apart
    assert (
        "- `performance/perplexity`: int8 and none (the best) are indistinguishable on 8,160 tokens "
        "(difference within two standard errors: int8 +0.5 ± 0.5); int4 differs from none by more than two "
        "standard errors." in text
    )
    # accuracy: the highest is the best; se = width / (2 x 1.96): int8 -0.005 +- 0.0137, int4 -0.06 +- 0.0154
    assert (
        "- `classify/accuracy`: int8 and none (the best) are indistinguishable on 450 examples "
        "(difference within two standard errors: int8 -0.005 ± 0.014); int4 differs from none" in text
    )
    assert "int2" not in text.split("\n\n", 1)[1]  # a run without an error is not judged


def test_a_baseline_is_chosen_by_a_param_value(store, compare):
    text = compare.table(store, "cmp", ["quant"], ["performance/perplexity"], baseline="quant=int4")
    assert (
        "- `performance/perplexity`: each of the other 2 runs differs from int4 (the baseline) by more than two "
        "standard errors on 8,160 tokens." in text
    )
    text = compare.table(store, "cmp", ["quant"], ["performance/perplexity"], baseline="quant=int8")
    assert "none and int8 (the baseline) are indistinguishable on 8,160 tokens (difference within two" in text
    with pytest.raises(SystemExit, match="--baseline quant=int16 names no run"):
        compare.table(store, "cmp", ["quant"], ["performance/perplexity"], baseline="quant=int16")


def test_without_errors_nothing_is_judged(store, compare):
    text = compare.table(store, "cmp", ["quant"], ["performance/tokens_scored"])
    assert "indistinguishable" not in text and "\n\n" not in text


def test_the_command_line_prints_the_verdict(store, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "compare_runs.py"),
            *("--uri", store, "--experiment", "cmp", "--params", "quant"),
            *("--metrics", "performance/perplexity", "--baseline", "quant=none"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "int8 and none (the baseline) are indistinguishable on 8,160 tokens" in proc.stdout
    assert proc.stdout.startswith(
        "compare_runs: no run of experiment 'cmp' belongs to a sweep (tag modelxray.sweep_id): comparing all 4 runs\n"
    )


# --- which runs: the newest sweep by default, one kind at a time, nothing logged unless asked


def _log(tracker, name: str, sweep: str | None, kind: str | None, quant: str, metrics: dict) -> str:
    tags = {"modelxray.sweep_id": sweep} if sweep else {}
    if kind:
        tags.update({"modelxray.kind": kind, "modelxray.task": kind})
    run = tracker.start(name, tags)
    run.log_params({"quant": quant})
    run.log_metrics(metrics)
    run.finish("FINISHED")
    return run.run_id


@pytest.fixture()
def sweeps(tmp_path):
    """An older sweep of a causal LM, a run outside any sweep, then the newest sweep mixing a causal
    LM's runs (token accuracy) with an image classifier's (image accuracy)."""
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    tracker = MlflowTracker(uri=uri, experiment="mix")
    ids = {"old none": _log(tracker, "old none", "old1", "causal_lm", "none", {"performance/accuracy": 0.50})}
    ids["alone"] = _log(tracker, "alone", None, "causal_lm", "int8", {"performance/accuracy": 0.45})
    for name, kind, quant, acc in [
        ("lm none", "causal_lm", "none", 0.31),
        ("lm int4", "causal_lm", "int4", 0.29),
        ("img none", "classification", "none", 0.96),
        ("img int4", "classification", "int4", 0.95),
    ]:
        ids[name] = _log(tracker, name, "new2", kind, quant, {"performance/accuracy": acc, "model/size": 1.0})
    return uri, ids


def test_the_newest_sweep_is_compared_by_default_and_named(sweeps, compare):
    uri, ids = sweeps
    chosen = compare.select(uri, "mix")
    assert set(chosen.runs.run_ids) == {ids[n] for n in ("lm none", "lm int4", "img none", "img int4")}
    assert chosen.note == (
        "the newest sweep, new2: 4 runs (of 2 sweeps and 6 runs in experiment 'mix'; --sweep-id ID for another "
        "sweep, --all for every run)"
    )
    assert set(compare.select(uri, "mix", sweep_id="old1").runs.run_ids) == {ids["old none"]}
    assert len(compare.select(uri, "mix", all_runs=True).runs) == 6
    with pytest.raises(SystemExit, match="no run of sweep 'nope' in experiment 'mix'"):
        compare.select(uri, "mix", sweep_id="nope")


def test_runs_of_different_kinds_are_never_ranked_together(sweeps, compare):
    uri, ids = sweeps
    front, best = ["model/size", "performance/accuracy"], ("performance/accuracy",)
    text = compare.table(uri, "mix", ["quant"], ["performance/accuracy"], pareto=front, maximize=best)
    first, rest = text.split("\n", 1)
    assert first == (
        "the runs are of 2 kinds (causal_lm: 2 runs, classification: 2 runs): their metrics are not comparable "
        "across kinds, so each kind has its own table and ranking (--kind KIND for one)"
    )
    lm, img = rest.split("### classification (2 runs)")
    assert "### causal_lm (2 runs)" in lm and ids["lm none"][:8] in lm and ids["img none"][:8] not in lm
    assert ids["img none"][:8] in img and ids["lm none"][:8] not in img
    # each kind has its own front: the best accuracy of each kind, not the image classifier's alone
    assert lm.count("**yes**") == 1 and img.count("**yes**") == 1
    assert f"| {ids['lm none'][:8]} | none | 0.31 | FINISHED | **yes** |" in lm
    # a baseline that names a run of one kind only judges that kind against it
    text = compare.table(uri, "mix", ["quant"], ["performance/accuracy"], baseline=ids["img none"][:8])
    assert "--baseline " + ids["img none"][:8] + " names no run of this kind: judged against the best run" in text
    one = compare.select(uri, "mix", kind="classification")
    assert set(one.runs.run_ids) == {ids["img none"], ids["img int4"]} and one.note.endswith(
        "; kind classification: 2 runs"
    )
    assert compare.mixed_kinds_line(one) is None
    with pytest.raises(SystemExit, match="--kind image names no run; the runs' kinds: causal_lm, classification"):
        compare.select(uri, "mix", kind="image")


def test_the_command_line_logs_only_when_asked(sweeps, tmp_path):
    uri, _ = sweeps
    from modelxray.tracking.runs import load_runs

    def cli(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(REPO / "scripts" / "compare_runs.py"), "--uri", uri, "--experiment", "mix", *extra],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )

    proc = cli(
        "--metrics",
        "performance/accuracy",
        "--pareto",
        "model/size,performance/accuracy",
        "--maximize",
        "performance/accuracy",
        "--plot",
        str(tmp_path / "p.png"),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("compare_runs: the newest sweep, new2: 4 runs (of 2 sweeps")
    assert "the runs are of 2 kinds (causal_lm: 2 runs, classification: 2 runs)" in proc.stdout
    assert (tmp_path / "p_causal_lm.png").exists() and (tmp_path / "p_classification.png").exists()
    assert "summary run" not in proc.stdout
    assert len(load_runs(uri, "mix", include_summaries=True)) == 6  # nothing logged
    proc = cli("--kind", "causal_lm", "--log")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "the runs are of" not in proc.stdout and "summary run: " in proc.stdout
    assert len(load_runs(uri, "mix", include_summaries=True)) == 7 and len(load_runs(uri, "mix")) == 6


@pytest.mark.parametrize(
    "metric,best",
    [
        ("lm_eval/pydoc_topic_mc/acc", "b"),
        ("lm_eval/pydoc_topic_mc/acc_norm_delta", "b"),
        ("lm_eval/pydoc_cloze/perplexity", "a"),
        ("performance/top1_agree", "b"),
    ],
)
def test_the_best_run_of_an_lm_eval_accuracy_is_the_highest(metric, best):
    from modelxray.report.comparison import _best

    runs = [{"run": "a", metric: 0.2}, {"run": "b", metric: 0.6}]
    assert _best(runs, metric, ())["run"] == best


def test_one_other_run_is_named_as_one():
    from modelxray.report.comparison import judge

    runs = [{"run_id": "a", "q": "none", "m": 1.0, "m_se": 0.01}, {"run_id": "b", "q": "int4", "m": 2.0, "m_se": 0.01}]
    line = judge(runs, "m", {"a": "none", "b": "int4"}, (), None, ["m", "m_se"])
    assert line == "- `m`: the other run differs from none (the best) by more than two standard errors."
