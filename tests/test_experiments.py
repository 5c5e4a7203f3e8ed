"""The learning-dynamics experiments from the command line: the project's one training loop with the
learning callbacks, logged to MLflow, and a sweep of experiments compared with overlaid curves."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO, mlflow_runs, run_cli

SMALL_GROKKING = [
    "experiment=grokking",
    "dataset.p=23",
    "dataset.train_fraction=0.8",
    "model.hidden=[256]",
    "train.steps=3500",
    "train.eval_every=50",
    "threads=1",
    "progress=false",
    "train.learning.features.sample_size=256",
]


@pytest.mark.slow  # a run.py process end to end (the CI runs the slow suite too)
def test_shortened_grokking_preset_generalizes_long_after_it_memorizes(tmp_path, tracking_uri, request):
    proc = run_cli(
        [*SMALL_GROKKING, f"tracker.uri={tracking_uri}", f"tracker.experiment={request.node.name}"],
        tmp_path,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    client, (run,) = mlflow_runs(tracking_uri, request.node.name)
    m = run.data.metrics
    t_train, t_test = m["train/transitions/train_accuracy/step"], m["train/transitions/test_accuracy/step"]
    assert t_train <= 400 and t_test >= 5 * t_train, (t_train, t_test)
    assert m["train/after_test_accuracy"] >= 0.95 and m["train/after_train_accuracy"] == 1.0
    test_acc = client.get_metric_history(run.info.run_id, "eval/test_accuracy")
    assert [h.step for h in test_acc][:3] == [0, 50, 100] and test_acc[-1].step == 3500
    assert {h.step for h in client.get_metric_history(run.info.run_id, "examples/forgetting_events_total")}
    out = next(tmp_path.glob("outputs/*/*"))
    for plot in (
        "memorization.png",
        "cartography_map.png",
        "forgetting_histogram.png",
        "feature_evolution.png",
        "gradient_flow.png",
        "training_curves.png",
    ):
        assert (out / "plots" / plot).is_file(), plot
    insights = (out / "insights.md").read_text()
    assert "delayed generalization (grokking)" in insights and "Fourier sparsity" in insights
    assert "experiment=grokking" in (out / "summary_report.md").read_text()


@pytest.mark.slow  # a run.py process end to end (the CI runs the slow suite too)
def test_sweep_of_experiments_and_overlaid_curves(tmp_path, tracking_uri, request):
    exp = request.node.name
    # train=classifier: in a sweep over experiments Hydra checks the other overrides before any experiment applies
    args = [
        "-m",
        "experiment=normal,memorization",
        "train=classifier",
        "train.steps=63",
        "train.eval_every=21",
        "threads=1",
        "progress=false",
        f"tracker.uri={tracking_uri}",
        f"tracker.experiment={exp}",
    ]
    proc = run_cli(args, tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client, runs = mlflow_runs(tracking_uri, exp)
    assert sorted(r.data.params["experiment"] for r in runs) == ["memorization", "normal"]
    noisy = next(r for r in runs if r.data.params["experiment"] == "memorization")
    assert "train/memorization/flipped_fitted_share" in noisy.data.metrics
    plot = tmp_path / "curves.png"
    cmp = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "compare_runs.py"),
            "--uri",
            tracking_uri,
            "--experiment",
            exp,
            "--params",
            "experiment",
            "--metrics",
            "train/after_test_accuracy",
            "--curves",
            "eval/test_accuracy,eval/train_accuracy",
            "--curves-plot",
            str(plot),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cmp.returncode == 0, cmp.stderr[-2000:]
    assert plot.stat().st_size > 10_000 and "| memorization |" in cmp.stdout
    from modelxray.tracking.runs import load_runs

    hist = load_runs(tracking_uri, exp).history("eval/test_accuracy", "experiment")
    assert set(hist["experiment"]) == {"normal", "memorization"} and set(hist["step"]) == {0, 21, 42, 63}


@pytest.mark.slow  # a run.py process end to end (the CI runs the slow suite too)
def test_post_hoc_learning_dynamics_on_saved_checkpoints(tmp_path, tracking_uri, request):
    exp = request.node.name
    common = [
        "experiment=normal",
        "threads=1",
        "progress=false",
        f"tracker.uri={tracking_uri}",
        f"tracker.experiment={exp}",
    ]
    proc = run_cli([*common, "train.steps=210", "train.checkpoint_every=42"], tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ckpt = next(tmp_path.glob("outputs/*/*/checkpoints"))
    assert sorted(p.name for p in ckpt.iterdir()) == [f"step_{s:06d}" for s in (42, 84, 126, 168, 210)]
    proc = run_cli(
        [*common, "train=none", "analyzer=learning_dynamics", f"model.checkpoints={ckpt}"], tmp_path, timeout=180
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    client, runs = mlflow_runs(tracking_uri, exp)
    post = next(r for r in runs if r.data.params.get("analyzer") == "learning_dynamics")
    trained = next(r for r in runs if r is not post)
    m = post.data.metrics
    assert m["learning_dynamics/checkpoints"] == 5 and post.info.status == "FINISHED"
    assert m["learning_dynamics/examples/epochs_recorded"] == 5
    # the last checkpoint is the trained model: the same final test accuracy as the training run measured
    assert (
        abs(m["learning_dynamics/memorization/test_accuracy"] - trained.data.metrics["train/after_test_accuracy"])
        < 1e-6
    )
    assert (
        "learning_dynamics/transitions/test_accuracy/n_change_points" in m
        and "learning_dynamics/memorization/gap_accuracy" in m
    )
    out = sorted(tmp_path.glob("outputs/*/*"))[-1]
    for plot in ("cartography_map.png", "memorization.png", "feature_evolution.png", "gradient_flow.png"):
        assert (out / "plots" / plot).is_file(), plot
    assert "TracIn over 5 checkpoints" in (out / "insights.md").read_text()
    # a folder without checkpoints: one line naming the key
    proc = run_cli([*common, "train=none", "analyzer=learning_dynamics", f"model.checkpoints={tmp_path}"], tmp_path)
    assert proc.returncode == 2 and "model.checkpoints:" in proc.stderr and "train.checkpoint_every" in proc.stderr
