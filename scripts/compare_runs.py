"""Compare the runs of one sweep of an MLflow experiment side by side: a Markdown table, the
Pareto-optimal runs for two metrics, a plot, and (with ``--log``) the comparison logged back to MLflow
as a summary run.

    python scripts/compare_runs.py --experiment modelxray \\
        --params quant --metrics performance/perplexity,quant/model_bytes_after,performance/bs1_latency_p50_ms \\
        --pareto quant/model_bytes_after,performance/perplexity --plot comparison.png

    python scripts/compare_runs.py --params quant --metrics 'robustness/fgsm_*_perplexity,robustness/clean_perplexity'

    # training runs: overlay step-indexed curves (e.g. the learning-dynamics experiments)
    python scripts/compare_runs.py --params experiment --metrics 'transitions/*/step,memorization/gap_accuracy' \\
        --curves eval/test_accuracy,eval/train_accuracy --curves-plot curves.png

Which runs: those of the newest sweep (tag ``modelxray.sweep_id``; the sweep whose run started last),
named in the first line of the output; ``--sweep-id ID`` picks another sweep, ``--all`` takes every
run of the experiment (also the default when no run belongs to a sweep). Sweep parent runs and
summary runs are never compared.

Runs of different kinds (tags ``modelxray.kind`` and ``modelxray.task``: a causal LM's token accuracy
is not an image classifier's accuracy) are never ranked together: the output says which kinds the
runs hold and gives one table per kind, each with its own Pareto front, baseline and plots (a kind's
name is added to the plot's file name); ``--kind KIND`` keeps one kind's runs.

Columns: the chosen params, then the chosen metrics (``*_bytes`` metrics shown in MiB; a ``*`` in a
key matches any text, expanded over the metrics the runs logged); one row per run, oldest first;
with ``--pareto X,Y`` a ``pareto`` column marks the runs no other run beats on both (both minimised;
``--maximize`` names the ones to maximise).

A metric logged with its error (``<metric>_se``, or a 95% interval ``<metric>_ci_low`` and
``<metric>_ci_high``) is shown as ``value ± error`` (``value [low, high]`` for an interval only), and
below the table each such metric says which runs cannot be told apart from the baseline: their
difference is within two standard errors, the two runs' own errors combined as independent
(``modelxray.metrics.distinguish``), with the tokens or examples scored when logged. Runs scored on
the same text share its variation, so this errs towards "indistinguishable"; a paired comparison on
the same text (quant_impact's ``delta_loss``) resolves finer differences. The baseline is
``--baseline`` (``KEY=VALUE`` of a param, e.g. ``quant=none``, or a run id prefix), else the best run
on each metric (lowest, highest for ``--maximize`` metrics and names with ``accuracy`` or ``agree``).

Nothing is written to the store unless ``--log`` is given: then the comparison is logged as a run
tagged ``modelxray.summary`` (summary runs are never compared). ``--uri`` defaults to
``sqlite:///mlflow.db`` in the working directory. The same data in Python:
``modelxray.tracking.runs.load_runs``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from modelxray.report.comparison import comparison_table, find_run, plot, plot_curves

SWEEP_TAG = "modelxray.sweep_id"
KIND_TAGS = ("modelxray.kind", "modelxray.task")
NO_KIND = "(no kind tag)"


class Selection:
    """The runs to compare (a ``RunCollection``), what they are (``note``: one line for the output) and
    each run's kind (run id -> kind). A plain class: tests load this script by path, outside
    ``sys.modules``, where a dataclass cannot resolve its annotations."""

    def __init__(self, runs, note: str, kinds: dict[str, str]) -> None:
        self.runs, self.note, self.kinds = runs, note, kinds

    def by_kind(self) -> dict[str, object]:
        """The runs grouped by kind, in the order the kinds first appear (oldest run first)."""
        from modelxray.tracking.runs import RunCollection

        frame = self.runs.frame
        order = list(dict.fromkeys(self.kinds[r] for r in frame["run_id"])) if len(frame) else []
        return {
            k: RunCollection(frame[frame["run_id"].map(self.kinds) == k], self.runs.uri, self.runs.experiment)
            for k in order
        }


def kind_of(tags: dict[str, str], params: dict[str, str]) -> str:
    """A run's kind: its ``modelxray.kind`` tag (with ``modelxray.task`` where that differs), else the
    ``model.kind`` param unless it is ``auto``, else ``(no kind tag)`` (runs logged before the tags)."""
    kind, task = (tags.get(t) for t in KIND_TAGS)
    if kind and task and task != kind:
        return f"{kind} ({task})"
    if kind or task:
        return kind or task
    declared = params.get("model.kind")
    return declared if declared and declared != "auto" else NO_KIND


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def select(
    uri: str,
    experiment: str,
    sweep_id: str | None = None,
    all_runs: bool = False,
    kind: str | None = None,
) -> Selection:
    """The runs to compare: ``sweep_id``'s, every run with ``all_runs``, else the newest sweep's (every
    run when none belongs to a sweep); only ``kind``'s when given."""
    from modelxray.tracking.runs import SUMMARY_TAG, load_runs

    seen: dict[str, tuple[dict, dict]] = {}  # run id -> (tags, params), read in the one search load_runs makes

    def keep(run) -> bool:
        seen[run.info.run_id] = (dict(run.data.tags), dict(run.data.params))
        return True

    try:
        runs = load_runs(uri, experiment, sweep_id=sweep_id, where=keep)
    except KeyError:
        raise SystemExit(f"compare_runs: no experiment {experiment!r} at {uri}") from None
    if len(runs) == 0:
        which = f"no run of sweep {sweep_id!r}" if sweep_id else "no run"
        raise SystemExit(f"compare_runs: {which} in experiment {experiment!r} at {uri}")
    sweep_of = {rid: tags.get(SWEEP_TAG) for rid, (tags, _) in seen.items() if not tags.get(SUMMARY_TAG)}
    frame = runs.frame
    if sweep_id:
        note = f"sweep {sweep_id}: {_n(len(frame), 'run')}"
    elif all_runs:
        note = f"every run of experiment {experiment!r} (--all): {_n(len(frame), 'run')}"
    else:
        in_sweeps = frame[frame["run_id"].map(sweep_of).notna()]
        if in_sweeps.empty:
            note = (
                f"no run of experiment {experiment!r} belongs to a sweep (tag {SWEEP_TAG}): comparing all "
                f"{_n(len(frame), 'run')}"
            )
        else:
            newest = sweep_of[in_sweeps.sort_values("start_time")["run_id"].iloc[-1]]
            sweeps = in_sweeps["run_id"].map(sweep_of).nunique()
            runs = runs.filter(run_id=lambda rid: sweep_of.get(rid) == newest)
            others = len(frame) - len(runs)
            note = (
                f"the newest sweep, {newest}: {_n(len(runs), 'run')} (of {_n(sweeps, 'sweep')} and "
                f"{_n(len(frame), 'run')} in experiment {experiment!r}; --sweep-id ID for another sweep, --all for "
                "every run)"
                if others
                else f"the newest sweep, {newest}: {_n(len(runs), 'run')}"
            )
    kinds = {rid: kind_of(*seen[rid]) for rid in runs.run_ids}
    if kind is not None:
        present = sorted(set(kinds.values()))
        if kind not in present:
            raise SystemExit(f"compare_runs: --kind {kind} names no run; the runs' kinds: {', '.join(present)}")
        runs = runs.filter(run_id=lambda rid: kinds[rid] == kind)
        kinds = {rid: kinds[rid] for rid in runs.run_ids}
        note += f"; kind {kind}: {_n(len(runs), 'run')}"
    return Selection(runs, note, kinds)


def mixed_kinds_line(selection: Selection) -> str | None:
    """One line naming the kinds when the runs mix them; None for runs of one kind."""
    groups = selection.by_kind()
    if len(groups) < 2:
        return None
    counts = ", ".join(f"{k}: {_n(len(g), 'run')}" for k, g in groups.items())
    return (
        f"the runs are of {len(groups)} kinds ({counts}): their metrics are not comparable across kinds, "
        "so each kind has its own table and ranking (--kind KIND for one)"
    )


def table(
    uri: str,
    experiment: str,
    params: list[str],
    metrics: list[str],
    pareto: list[str] | None = None,
    maximize: tuple[str, ...] = (),
    sweep_id: str | None = None,
    baseline: str | None = None,
    all_runs: bool = False,
) -> str:
    """The comparison as the command line prints it (without its first line, which names the runs)."""
    return render(select(uri, experiment, sweep_id, all_runs), params, metrics, pareto, maximize, baseline)


def render(selection: Selection, params, metrics, pareto, maximize, baseline: str | None = None) -> str:
    """One table of runs of one kind; a line naming the kinds, then one titled table per kind, else."""
    groups = selection.by_kind()
    if len(groups) == 1:
        return _table(selection.runs, params, metrics, pareto, maximize, baseline)
    if baseline and not any(find_run(list(g), baseline) for g in groups.values()):
        raise SystemExit(f"compare_runs: --baseline {baseline} names no run (KEY=VALUE of a param, or a run id prefix)")
    parts = [mixed_kinds_line(selection)]
    for kind, group in groups.items():
        own = baseline if baseline and find_run(list(group), baseline) else None
        head = f"### {kind} ({_n(len(group), 'run')})"
        if baseline and own is None:
            head += f"\n\n--baseline {baseline} names no run of this kind: judged against the best run"
        parts.append(head + "\n\n" + _table(group, params, metrics, pareto, maximize, own))
    return "\n\n".join(parts)


def _table(runs, params, metrics, pareto, maximize, baseline: str | None = None) -> str:
    try:
        return comparison_table(runs, params, metrics, pareto, maximize, baseline)
    except ValueError as exc:
        raise SystemExit(f"compare_runs: --{exc}") from None


def log_summary(selection: Selection, text: str, plots: list[Path], args) -> str:
    """The comparison as an MLflow run of the same experiment, tagged so it is never compared itself."""
    from mlflow.tracking import MlflowClient

    from modelxray.tracking.runs import SUMMARY_TAG

    runs = selection.runs
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
    client.log_param(rid, "runs", selection.note)
    if args.pareto:
        client.log_param(rid, "pareto", args.pareto)
        maximize = tuple(args.maximize.split(",")) if args.maximize else ()
        front = [r for g in selection.by_kind().values() for r in g.pareto(*args.pareto.split(","), maximize=maximize)]
        client.set_tag(rid, "modelxray.pareto_runs", ",".join(front))
    client.log_text(rid, text + "\n", "comparison.md")
    for path in plots:
        client.log_artifact(rid, str(path))
    client.set_terminated(rid, "FINISHED")
    return rid


def _per_kind(path: Path, kind: str, several: bool) -> Path:
    """A plot's path; with several kinds, one file per kind (``comparison_causal_lm.png``)."""
    if not several:
        return path
    slug = "".join(c if c.isalnum() or c in "-_" else "_" for c in kind).strip("_") or "kind"
    return path.with_name(f"{path.stem}_{slug}{path.suffix}")


def main() -> None:
    ap = argparse.ArgumentParser(
        description="Compare the runs of one sweep side by side: a Markdown table per kind of run, the Pareto "
        "front of two metrics, plots; logged to MLflow only with --log.",
        epilog="Default: the runs of the newest sweep, ranked kind by kind; nothing is logged without --log.",
    )
    ap.add_argument("--uri", default="sqlite:///mlflow.db")
    ap.add_argument("--experiment", default="modelxray")
    which = ap.add_mutually_exclusive_group()
    which.add_argument(
        "--sweep-id", default=None, help="only the runs of this sweep (tag modelxray.sweep_id; default: the newest)"
    )
    which.add_argument("--all", action="store_true", help="every run of the experiment, not one sweep's")
    ap.add_argument("--kind", default=None, help="only runs of this kind (tag modelxray.kind, e.g. causal_lm)")
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
    ap.add_argument("--log", action="store_true", help="log the comparison to MLflow as a summary run (default: not)")
    ap.add_argument("--no-log", action="store_true", help=argparse.SUPPRESS)  # the old default's opt-out: a no-op
    args = ap.parse_args()
    params = [p for p in args.params.split(",") if p]
    pareto = args.pareto.split(",") if args.pareto else None
    if pareto is not None and len(pareto) != 2:
        raise SystemExit("compare_runs: --pareto takes two metrics, X,Y")
    maximize = tuple(m for m in args.maximize.split(",") if m)
    selection = select(args.uri, args.experiment, args.sweep_id, args.all, args.kind)
    print(f"compare_runs: {selection.note}\n", flush=True)
    text = render(selection, params, [m for m in args.metrics.split(",") if m], pareto, maximize, args.baseline)
    print(text)
    groups = selection.by_kind()
    several = len(groups) > 1
    label = params[0] if params else "run_id"
    plots: list[Path] = []
    if pareto:
        base = Path(args.plot or Path(tempfile.mkdtemp()) / "comparison.png")
        for kind, group in groups.items():
            path = plot(group, *pareto, label, maximize, _per_kind(base, kind, several))
            plots.append(path)
            print(f"\nplot{f' ({kind})' if several else ''}: {path}")
    if args.curves:
        base = Path(args.curves_plot or Path(tempfile.mkdtemp()) / "curves.png")
        for kind, group in groups.items():
            path = plot_curves(group, [c for c in args.curves.split(",") if c], label, _per_kind(base, kind, several))
            plots.append(path)
            print(f"curves{f' ({kind})' if several else ''}: {path}")
    if args.log:
        print(f"summary run: {log_summary(selection, text, plots, args)}")


if __name__ == "__main__":
    main()
