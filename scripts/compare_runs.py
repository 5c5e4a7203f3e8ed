"""Compare the runs of an MLflow experiment side by side: a Markdown table, the Pareto-optimal runs
for two metrics, a plot, and the comparison logged back to MLflow as a summary run.

    python scripts/compare_runs.py --experiment modelxray \\
        --params quant --metrics performance/perplexity,quant/model_bytes_after,performance/bs1_latency_p50_ms \\
        --pareto quant/model_bytes_after,performance/perplexity --plot comparison.png

    python scripts/compare_runs.py --params quant --metrics 'robustness/fgsm_*_perplexity,robustness/clean_perplexity'

    # training runs: overlay step-indexed curves (e.g. the learning-dynamics experiments)
    python scripts/compare_runs.py --params experiment --metrics 'transitions/*/step,memorization/gap_accuracy' \
        --curves eval/test_accuracy,eval/train_accuracy --curves-plot curves.png

Columns: the chosen params, then the chosen metrics (``*_bytes`` metrics shown in MiB; a ``*`` in a
key matches any text, expanded over the metrics the runs logged); one row per run, oldest first;
with ``--pareto X,Y`` a ``pareto`` column marks the runs no other run beats on both (both minimised;
``--maximize`` names the ones to maximise). ``--sweep-id`` keeps one sweep's runs.

A metric logged with its error (``<metric>_se``, or a 95% interval ``<metric>_ci_low`` and
``<metric>_ci_high``) is shown as ``value ± error`` (``value [low, high]`` for an interval only), and
below the table each such metric says which runs cannot be told apart from the baseline: their
difference is within two standard errors, the two runs' own errors combined as independent
(``modelxray.metrics.distinguish``), with the tokens or examples scored when logged. Runs scored on
the same text share its variation, so this errs towards "indistinguishable"; a paired comparison on
the same text (quant_impact's ``delta_loss``) resolves finer differences. The baseline is
``--baseline`` (``KEY=VALUE`` of a param, e.g. ``quant=none``, or a run id prefix), else the best run
on each metric (lowest, highest for ``--maximize`` metrics and names with ``accuracy`` or ``agree``).

The comparison
is logged as a run tagged ``modelxray.summary`` (``--no-log`` skips that; summary runs are never
compared). ``--uri`` defaults to ``sqlite:///mlflow.db`` in the working directory. The same data
in Python: ``modelxray.tracking.runs.load_runs``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from modelxray.report.comparison import comparison_table, plot, plot_curves


def _load(uri: str, experiment: str, sweep_id: str | None):
    from modelxray.tracking.runs import load_runs

    try:
        return load_runs(uri, experiment, sweep_id=sweep_id)
    except KeyError:
        raise SystemExit(f"compare_runs: no experiment {experiment!r} at {uri}") from None


def table(
    uri: str,
    experiment: str,
    params: list[str],
    metrics: list[str],
    pareto: list[str] | None = None,
    maximize: tuple[str, ...] = (),
    sweep_id: str | None = None,
    baseline: str | None = None,
) -> str:
    runs = _load(uri, experiment, sweep_id)
    return _table(runs, params, metrics, pareto, maximize, baseline)


def _table(runs, params, metrics, pareto, maximize, baseline: str | None = None) -> str:
    try:
        return comparison_table(runs, params, metrics, pareto, maximize, baseline)
    except ValueError as exc:
        raise SystemExit(f"compare_runs: --{exc}") from None


def log_summary(runs, text: str, plot_path: Path | None, args, curves_path: Path | None = None) -> str:
    """The comparison as an MLflow run of the same experiment, tagged so it is never compared itself."""
    from mlflow.tracking import MlflowClient

    from modelxray.tracking.runs import SUMMARY_TAG

    client = MlflowClient(tracking_uri=runs.uri)
    exp = client.get_experiment_by_name(runs.experiment)
    run = client.create_run(
        exp.experiment_id,
        run_name=f"comparison of {len(runs)} runs",
        tags={SUMMARY_TAG: "true", "modelxray.compared_runs": ",".join(r[:8] for r in runs.run_ids)},
    )
    rid = run.info.run_id
    client.log_param(rid, "params", args.params)
    client.log_param(rid, "metrics", args.metrics)
    if args.pareto:
        client.log_param(rid, "pareto", args.pareto)
        front = runs.pareto(*args.pareto.split(","), maximize=tuple(args.maximize.split(",")) if args.maximize else ())
        client.set_tag(rid, "modelxray.pareto_runs", ",".join(front))
    client.log_text(rid, text + "\n", "comparison.md")
    for path in (plot_path, curves_path):
        if path is not None:
            client.log_artifact(rid, str(path))
    client.set_terminated(rid, "FINISHED")
    return rid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--uri", default="sqlite:///mlflow.db")
    ap.add_argument("--experiment", default="modelxray")
    ap.add_argument("--sweep-id", default=None, help="only the runs of this sweep (tag modelxray.sweep_id)")
    ap.add_argument("--params", default="quant", help="comma-separated param keys")
    ap.add_argument("--metrics", default="performance/perplexity", help="comma-separated metric keys (* allowed)")
    ap.add_argument("--pareto", default=None, help="X,Y: mark the runs on the Pareto front of these two metrics")
    ap.add_argument("--maximize", default="", help="comma-separated metrics to maximise (--pareto, the best run)")
    ap.add_argument(
        "--baseline",
        default=None,
        help="KEY=VALUE of a param (quant=none) or a run id prefix: the run others are judged against "
        "(default: the best run on each metric)",
    )
    ap.add_argument("--plot", default=None, help="save the Pareto plot here (default with --pareto: a temp file)")
    ap.add_argument("--curves", default=None, help="comma-separated step-indexed metrics to overlay, one line per run")
    ap.add_argument("--curves-plot", default=None, help="save the overlaid curves here (default: a temp file)")
    ap.add_argument("--no-log", action="store_true", help="do not log the comparison as a summary run")
    args = ap.parse_args()
    runs = _load(args.uri, args.experiment, args.sweep_id)
    params = [p for p in args.params.split(",") if p]
    pareto = args.pareto.split(",") if args.pareto else None
    if pareto is not None and len(pareto) != 2:
        raise SystemExit("compare_runs: --pareto takes two metrics, X,Y")
    maximize = tuple(m for m in args.maximize.split(",") if m)
    text = _table(runs, params, [m for m in args.metrics.split(",") if m], pareto, maximize, args.baseline)
    print(text)
    plot_path = None
    if pareto:
        plot_path = Path(args.plot or Path(tempfile.mkdtemp()) / "comparison.png")
        plot(runs, *pareto, params[0] if params else "run_id", maximize, plot_path)
        print(f"\nplot: {plot_path}")
    curves_path = None
    if args.curves:
        curves_path = Path(args.curves_plot or Path(tempfile.mkdtemp()) / "curves.png")
        plot_curves(runs, [c for c in args.curves.split(",") if c], params[0] if params else "run_id", curves_path)
        print(f"curves: {curves_path}")
    if not args.no_log:
        print(f"summary run: {log_summary(runs, text, plot_path, args, curves_path)}")


if __name__ == "__main__":
    main()
