"""The runs of an experiment as a DataFrame (filter, group, Pareto, artifacts) and the comparison
script with its Pareto marking, plot and summary run."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO
from modelxray.tracking.mlflow_tracker import MlflowTracker
from modelxray.tracking.runs import SUMMARY_TAG, load_runs, parse_param


@pytest.fixture()
def store(tmp_path):
    """Four finished runs with known params and metrics, one with an artifact."""
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    tracker = MlflowTracker(uri=uri, experiment="cmp")
    points = {"none": (500.0, 18.0), "int8": (210.0, 18.1), "int4": (160.0, 29.8), "int2": (170.0, 900.0)}
    for i, (quant, (size, ppl)) in enumerate(points.items()):
        run = tracker.start(quant, {"modelxray.sweep_id": "s1" if i < 3 else "s2"})
        run.log_params(
            {"quant": quant, "dataset.max_tokens": "2048", "analyzer.performance.speed_batch_sizes": "[1, 4]"}
        )
        run.log_metrics({"quant/model_mb": size, "performance/perplexity": ppl})
        (tmp_path / quant).mkdir()
        (tmp_path / quant / "note.txt").write_text(quant)
        run.log_artifacts(tmp_path / quant)
        run.finish("FINISHED")
    return uri, tmp_path


def test_params_come_back_typed():
    assert parse_param("2048") == 2048 and parse_param("[1, 4]") == [1, 4] and parse_param("true") is True
    assert parse_param("int4") == "int4" and parse_param("null") is None and parse_param("0.25") == 0.25


def test_load_filter_group_pareto_and_artifacts(store):
    uri, _ = store
    runs = load_runs(uri, "cmp")
    assert len(runs) == 4 and list(runs.frame["quant"]) == ["none", "int8", "int4", "int2"]
    assert runs.frame["dataset.max_tokens"].iloc[0] == 2048
    assert len(runs.filter(quant=["int4", "int8"])) == 2
    assert len(runs.filter({"performance/perplexity": (0, 20)})) == 2
    assert len(runs.filter(dataset__max_tokens=2048)) == 4
    assert len(runs.filter(quant=lambda q: q.startswith("int"))) == 3
    assert set(runs.group_by("quant")) == {"none", "int8", "int4", "int2"}
    assert list(runs.group_by("analyzer.performance.speed_batch_sizes")) == [(1, 4)]
    by_id = dict(zip(runs.frame["run_id"], runs.frame["quant"]))
    assert sorted(by_id[r] for r in runs.pareto("quant/model_mb", "performance/perplexity")) == ["int4", "int8", "none"]
    assert len(load_runs(uri, "cmp", sweep_id="s1")) == 3
    first = runs.run_ids[0]
    assert open(runs.artifact(first, "note.txt")).read() == "none"
    with pytest.raises(KeyError, match="no MLflow experiment"):
        load_runs(uri, "missing")


def test_compare_script_marks_pareto_plots_and_logs_a_summary_run(store):
    uri, tmp = store
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "compare_runs.py"),
            "--uri",
            uri,
            "--experiment",
            "cmp",
            "--params",
            "quant",
            "--metrics",
            "quant/*,performance/perplexity",
            "--pareto",
            "quant/model_mb,performance/perplexity",
            "--plot",
            str(tmp / "p.png"),
            "--all",  # both sweeps (the default is the newest, s2)
            "--log",
        ],
        capture_output=True,
        text=True,
        cwd=tmp,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {
        line.split("|")[2].strip(): line
        for line in proc.stdout.splitlines()
        if line.startswith("| ") and "---" not in line
    }
    assert rows["int8"].rstrip().endswith("**yes** |") and rows["int4"].rstrip().endswith("**yes** |")
    assert rows["none"].rstrip().endswith("**yes** |")  # the best perplexity, however large
    assert not rows["int2"].rstrip().endswith("**yes** |")  # int4 is smaller and better
    assert (tmp / "p.png").stat().st_size > 10_000
    summaries = load_runs(uri, "cmp", include_summaries=True).frame
    assert len(summaries) == 5 and len(load_runs(uri, "cmp")) == 4  # the summary is never compared itself
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    (summary,) = [
        r
        for r in client.search_runs([client.get_experiment_by_name("cmp").experiment_id])
        if r.data.tags.get(SUMMARY_TAG)
    ]
    assert {a.path for a in client.list_artifacts(summary.info.run_id)} == {"comparison.md", "p.png"}
