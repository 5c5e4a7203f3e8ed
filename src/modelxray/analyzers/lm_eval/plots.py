"""lm-eval plots: each task's metrics with their 95% intervals (lm-eval's standard errors), one panel
per metric (accuracies share a 0-1 axis; a perplexity has its own), and the chance level of each
multiple-choice task as a dashed mark."""

from __future__ import annotations

import pandas as pd
import seaborn as sns

from modelxray.plotting import new_figure

Z95 = 1.96


def figures(result) -> dict:
    rows = result.tables.get("tasks") or []
    if not rows:
        return {}
    return {"lm_eval_tasks.png": _tasks(rows, result.data.get("chance") or {})}


def _tasks(rows: list[dict], chance: dict):
    df = pd.DataFrame(rows)
    metrics = list(dict.fromkeys(df["metric"]))
    fig, axes = new_figure(ncols=len(metrics), width=4.8, height=max(2.6, 0.55 * df["task"].nunique() + 1.6))
    for ax, metric in zip(axes[0], metrics):
        part = df[df["metric"] == metric].reset_index(drop=True)
        sns.pointplot(data=part, x="value", y="task", ax=ax, linestyles="none", color="#3b6ea8", errorbar=None)
        err = [Z95 * se if se is not None else 0.0 for se in part["se"]]
        ax.errorbar(part["value"], range(len(part)), xerr=err, fmt="none", ecolor="#3b6ea8", capsize=3)
        for i, task in enumerate(part["task"]):
            if metric.startswith("acc") and chance.get(task) is not None:
                ax.plot([chance[task]] * 2, [i - 0.3, i + 0.3], ls="--", color="#c0392b", lw=1.2)
        if metric.startswith("acc"):
            ax.set_xlim(0, 1)
        ax.set_xlabel(f"{metric} (bars: 95% interval)")
        ax.set_ylabel("")
        ax.set_title(metric)
    fig.suptitle("lm-eval tasks (red dashes: chance)", fontsize=11)
    fig.tight_layout()
    return fig


def panel(ax, result) -> bool:
    rows = [r for r in result.tables.get("tasks") or [] if r["metric"].startswith("acc")]
    if not rows:
        return False
    df = pd.DataFrame(rows)
    df["label"] = df["task"] + " " + df["metric"]
    sns.barplot(data=df, x="value", y="label", ax=ax, color="#3b6ea8")
    ax.set_xlim(0, 1)
    ax.set_xlabel("accuracy")
    ax.set_ylabel("")
    ax.set_title("lm_eval: task accuracy", fontsize=10)
    return True
