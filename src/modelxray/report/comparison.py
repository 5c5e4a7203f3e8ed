"""Runs side by side: a Markdown table of chosen params and metrics (``value ± error``), the runs no
other run beats on two metrics (Pareto), which runs cannot be told apart within their uncertainty,
and the plots. ``scripts/compare_runs.py`` is its command line; a sweep's parent run logs the same
table and plot when the sweep ends (``modelxray.sweep``).

A metric logged with its error (``<metric>_se``, or a 95% interval ``<metric>_ci_low`` and
``<metric>_ci_high``) is shown as ``value ± error``; two runs are indistinguishable when their
difference is within two standard errors, the runs' own errors combined as independent
(``modelxray.metrics.distinguish``)."""

from __future__ import annotations

import math
from pathlib import Path

from modelxray.metrics.distinguish import difference, number_at, se_of

ERROR_SUFFIXES = ("_se", "_ci_low", "_ci_high")
COUNTS = (("tokens_scored", "tokens"), ("examples_scored", "examples"), ("samples", "samples"))
HIGHER_IS_BETTER = ("accuracy", "agree")  # words in a metric's name that make its best run the highest
# lm-eval's metric names whose best run is the highest (and their paired ``_delta``)
HIGHER_LEAVES = ("acc", "acc_norm", "exact_match", "f1", "mcc", "bleu", "chrf", "em")


def fmt(key: str, value) -> str:
    from modelxray.core.formatting import human_bytes

    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if key.endswith("_bytes") or key.endswith("bytes_after") or key.endswith("bytes_before"):
        return human_bytes(value)  # KiB for a small model, MiB or GiB for a large one
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e5 else f"{value:,.0f}"
    return str(value)


def expand(keys: list[str], logged: list[str]) -> list[str]:
    """Keys with ``*`` become every logged metric they match, in sorted order."""
    import fnmatch

    names = sorted(set(logged))
    out: list[str] = []
    for key in keys:
        for k in fnmatch.filter(names, key) if "*" in key else [key]:
            if k not in out:
                out.append(k)
    return out


def comparison_table(runs, params, metrics, pareto=None, maximize=(), baseline: str | None = None) -> str:
    """A Markdown table of ``runs`` (a ``RunCollection``): ``params`` then ``metrics`` (``*`` expands), one
    row per run, the Pareto front of ``pareto`` (two metrics) marked, and below it which runs cannot
    be told apart from ``baseline`` (``KEY=VALUE`` of a param, a run id prefix; None: the best run)."""
    frame = runs.frame
    metrics = fold_errors(expand(metrics, [c for c in frame.columns if "/" in c]))
    front = set(runs.pareto(*pareto, maximize=maximize)) if pareto else set()
    head = ["run", *params, *metrics, "status"] + (["pareto"] if pareto else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in runs:
        cells = [
            r["run_id"][:8],
            *(fmt(p, r.get(p, "-")) for p in params),
            *(with_error(m, r) for m in metrics),
            r["status"],
        ] + (["**yes**" if r["run_id"] in front else ""] if pareto else [])
        lines.append("| " + " | ".join(cells) + " |")
    if baseline and find_run(list(runs), baseline) is None:
        raise ValueError(f"baseline {baseline} names no run (KEY=VALUE of a param, or a run id prefix)")
    judged = distinguishable(list(runs), params, metrics, maximize, baseline, list(frame.columns))
    return "\n".join(lines) + ("\n\n" + judged if judged else "")


def fold_errors(metrics: list[str]) -> list[str]:
    """The chosen metrics less the error keys of another chosen metric (``x_se``, ``x_ci_low``,
    ``x_ci_high`` with ``x`` chosen): those are shown in ``x``'s cell."""
    chosen = set(metrics)
    return [m for m in metrics if not any(m.endswith(s) and m[: -len(s)] in chosen for s in ERROR_SUFFIXES)]


def with_error(key: str, r: dict) -> str:
    """A metric's cell: ``value ± se`` when the run logged ``<key>_se``, ``value [low, high]`` when it
    logged an interval only, ``value ± se`` for a perplexity whose loss has an error, else the value."""
    text = fmt(key, r.get(key))
    low, high = number_at(r, f"{key}_ci_low"), number_at(r, f"{key}_ci_high")
    if text == "-":
        return text
    if math.isfinite(number_at(r, f"{key}_se")) or not (math.isfinite(low) and math.isfinite(high)):
        se = se_of(r, key)
        return f"{text} ± {se:.2g}" if math.isfinite(se) else text
    return f"{text} [{fmt(key, low)}, {fmt(key, high)}]"


def count_key(metric: str, columns: list[str]) -> tuple[str, str] | None:
    """The logged count of what ``metric`` was scored on, and its noun: ``<dir>/tokens_scored``
    (``examples_scored``, ``samples``) beside it, else the one key of its directory ending so
    (``bitwidth/reference_tokens_scored``); None when none is logged."""
    folder = metric.rsplit("/", 1)[0] + "/" if "/" in metric else ""
    for name, noun in COUNTS:
        if folder + name in columns:
            return folder + name, noun
    for name, noun in COUNTS:
        found = [c for c in columns if c.startswith(folder) and "/" not in c[len(folder) :] and c.endswith(name)]
        if len(found) == 1:
            return found[0], noun
    return None


def _labels(runs: list[dict], params: list[str]) -> dict[str, str]:
    """Each run's name in a sentence: its params' values (``int8``), the run id where they repeat."""
    base = {r["run_id"]: ", ".join(str(r.get(p, "-")) for p in params) or r["run_id"][:8] for r in runs}
    repeated = {v for v in base.values() if list(base.values()).count(v) > 1}
    return {k: f"{v} ({k[:8]})" if v in repeated else v for k, v in base.items()}


def find_run(runs: list[dict], selector: str) -> dict | None:
    """The first run ``selector`` names: ``KEY=VALUE`` of a param (``quant=none``) or a run id prefix."""
    key, eq, want = selector.partition("=")
    for r in runs:
        if (eq and str(r.get(key)) == want) or (not eq and r["run_id"].startswith(selector)):
            return r
    return None


def _with_error(runs: list[dict], metric: str) -> list[dict]:
    return [r for r in runs if math.isfinite(number_at(r, metric)) and math.isfinite(se_of(r, metric))]


def _best(scored: list[dict], metric: str, maximize: tuple[str, ...]) -> dict | None:
    """The best run on ``metric``: the lowest, the highest for ``--maximize`` metrics and names
    with ``accuracy`` or ``agree``, and lm-eval's accuracies (``lm_eval/<task>/acc``) and their changes."""
    leaf = metric.rsplit("/", 1)[-1]
    higher = (
        metric in maximize or any(w in leaf for w in HIGHER_IS_BETTER) or leaf.removesuffix("_delta") in HIGHER_LEAVES
    )
    return (max if higher else min)(scored, key=lambda r: number_at(r, metric)) if scored else None


def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _sample(runs: list[dict], metric: str, columns: list[str]) -> str:
    """`` on 8,160 tokens`` (`` on 4,096 and 8,160 tokens`` when the runs differ); empty unless logged."""
    found = count_key(metric, columns)
    if found is None:
        return ""
    counts = sorted({int(number_at(r, found[0])) for r in runs if math.isfinite(number_at(r, found[0]))})
    if not counts:
        return ""
    return f" on {_join([f'{c:,}' for c in counts])} {found[1]}"


def judge(runs: list[dict], metric: str, labels: dict, maximize, baseline: dict | None, columns) -> str | None:
    """One line on ``metric``: the runs that cannot be told apart from the baseline (``baseline``,
    else the best run), and those that can; None unless two runs carry an error on it."""
    scored = _with_error(runs, metric)
    ref = baseline if baseline is not None else _best(scored, metric, maximize)
    if ref is None or len(scored) < 2 or not any(r["run_id"] == ref["run_id"] for r in scored):
        return None
    name = labels[ref["run_id"]]
    what = f"{name} ({'the baseline' if baseline is not None else 'the best'})"
    same, apart = [], []
    for r in scored:
        if r["run_id"] != ref["run_id"]:
            d = difference(number_at(r, metric), number_at(ref, metric), se_of(r, metric), se_of(ref, metric))
            (same if d.indistinguishable else apart).append((labels[r["run_id"]], d))
    sample = _sample(scored, metric, columns)
    if not same:
        others = "the other run differs" if len(apart) == 1 else f"each of the other {len(apart)} runs differs"
        return f"- `{metric}`: {others} from {what} by more than two standard errors{sample}."
    diffs = ", ".join(f"{n} {d.value:+.3g} ± {d.se:.2g}" for n, d in same)
    line = (
        f"- `{metric}`: {_join([n for n, _ in same] + [what])} are indistinguishable{sample} "
        f"(difference within two standard errors: {diffs})"
    )
    if apart:
        line += f"; {_join([n for n, _ in apart])} differ{'s' if len(apart) == 1 else ''} from {name} by more than two standard errors"
    return line + "."


def distinguishable(runs: list[dict], params, metrics, maximize, baseline: str | None, columns) -> str:
    """Below the table: for each metric with errors, the runs that differ from the baseline by less
    than their uncertainty. Empty when no metric carries an error."""
    labels = _labels(runs, params)
    base = find_run(runs, baseline) if baseline else None
    lines = [line for m in metrics if (line := judge(runs, m, labels, maximize, base, columns))]
    if not lines:
        return ""
    head = (
        "Within the uncertainty (a difference within two standard errors, each run's own error combined as "
        "if independent; runs scored on the same text share its variation, so their difference is known "
        'better than this and the verdict errs towards "indistinguishable"):'
    )
    return "\n".join([head, *lines])


def plot(runs, x: str, y: str, label: str, maximize: tuple[str, ...], path: Path) -> Path:
    """The runs at (``x``, ``y``), the Pareto front joined, each run labelled by ``label``; drawn in
    the reports' style, its title wrapped and its size ticks slanted so nothing is cut or overlaps."""
    from modelxray.plotting import save, style

    with style():
        save(_pareto_figure(runs, x, y, label, maximize), path)
    return path


def _pareto_figure(runs, x: str, y: str, label: str, maximize: tuple[str, ...]):
    import seaborn as sns

    from modelxray.plotting import new_figure

    df = runs.frame.dropna(subset=[x, y]).copy()
    front = set(runs.pareto(x, y, maximize=maximize))
    df["Pareto-optimal"] = df["run_id"].isin(front)
    df["label"] = df[label].astype(str) if label in df else df["run_id"].str[:8]
    fig, axes = new_figure(width=7.5, height=5.2)
    ax = axes[0][0]
    sns.scatterplot(data=df, x=x, y=y, hue="Pareto-optimal", style="Pareto-optimal", s=90, ax=ax)
    edge = df[df["Pareto-optimal"]].sort_values(x)
    ax.plot(edge[x], edge[y], color="#2c3e50", lw=1, ls="--")
    errors = [se_of(r, y) for r in df.to_dict("records")]
    if any(math.isfinite(e) for e in errors):  # two standard errors either side, where the run logged one
        yerr = [2 * e if math.isfinite(e) else 0.0 for e in errors]
        ax.errorbar(df[x], df[y], yerr=yerr, fmt="none", ecolor="#7f8c8d", capsize=3, lw=1, zorder=0)
        ax.text(0.01, 0.01, "bars: ± 2 standard errors", transform=ax.transAxes, fontsize=8, color="#7f8c8d")
    for _, r in df.iterrows():
        ax.annotate(r["label"], (r[x], r[y]), fontsize=8, xytext=(4, 4), textcoords="offset points")
    for axis, key in ((ax.xaxis, x), (ax.yaxis, y)):
        if key.endswith("bytes") or key.endswith("bytes_after"):
            _in_bytes(axis)
    _slant(ax)
    ax.set_title(_pareto_title(runs.experiment, len(df), x, y), fontsize=11)
    return fig


def _pareto_title(experiment: str, n_runs: int, x: str, y: str, width: int = 64) -> str:
    """The plot's title, wrapped to lines that fit its width (a long experiment name too)."""
    import textwrap

    lines = [f"{experiment}: {n_runs} runs", f"Pareto front of {y} against {x}"]
    return "\n".join(part for line in lines for part in textwrap.wrap(line, width))


def _in_bytes(axis) -> None:
    """Ticks at round KiB/MiB/GiB values, few enough that their labels fit side by side."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    from modelxray.core.formatting import human_bytes

    class BinaryLocator(MaxNLocator):
        def tick_values(self, vmin, vmax):
            unit = 1024 ** min(4, max(0, int(math.log(max(abs(vmin), abs(vmax), 1.0), 1024))))
            return super().tick_values(vmin / unit, vmax / unit) * unit

    axis.set_major_locator(BinaryLocator(nbins=5))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: human_bytes(v)))


def _slant(ax) -> None:
    """The x tick labels slanted, anchored at their tick: long labels do not run into each other."""
    ax.tick_params(axis="x", labelrotation=30)
    for text in ax.get_xticklabels():
        text.set_horizontalalignment("right")
        text.set_rotation_mode("anchor")


def plot_curves(runs, metrics: list[str], label: str, path: Path) -> Path:
    """One panel per metric, one line per run (labelled by ``label``), over optimizer steps."""
    import matplotlib

    matplotlib.use("Agg")
    import seaborn as sns

    from modelxray.plotting import new_figure, save

    fig, axes = new_figure(ncols=len(metrics), width=6.0, height=4.4)
    for ax, metric in zip(axes[0], metrics):
        df = runs.history(metric, label) if label != "run_id" else runs.history(metric)
        if df.empty:
            ax.set_title(f"{metric}: not logged by these runs")
            continue
        df["run"] = df[label].astype(str) if label in df else df["run_id"].str[:8]
        sns.lineplot(df, x="step", y="value", hue="run", ax=ax, estimator=None, units="run_id")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(metric)
        ax.set_title(metric)
    fig.suptitle(f"{runs.experiment}: {len(runs)} runs")
    save(fig, path)
    return path
