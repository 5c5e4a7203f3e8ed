"""scripts/compare_runs.py with errors: value ± error in the table, and which runs cannot be told
apart from the baseline (or the best run) on a metric, with the tokens or examples scored."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from conftest import REPO
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
    spec = importlib.util.spec_from_file_location("compare_runs", REPO / "scripts" / "compare_runs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
        "- `performance/perplexity`: every run differs from int4 (the baseline) by more than two standard "
        "errors on 8,160 tokens." in text
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
            *("--metrics", "performance/perplexity", "--baseline", "quant=none", "--no-log"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "int8 and none (the baseline) are indistinguishable on 8,160 tokens" in proc.stdout
