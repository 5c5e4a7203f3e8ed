"""The lm_eval analyzer's observations (insights.md): each task's figures with lm-eval's standard
error and what they were measured on, and a multiple-choice task whose accuracy cannot be told apart
from chance (a model that answers at random). Pure functions of the Result."""

from __future__ import annotations

from modelxray.core.result import Result


def insights(result: Result, results: dict[str, Result], cfg) -> list[str]:
    rows = result.tables.get("tasks") or []
    if not result.ok or not rows:
        return []
    data = result.data
    shots = data.get("n_shot") or {}
    out = [
        f"lm-eval {data.get('lm_eval_version', '')} on {len({r['task'] for r in rows})} task(s), scored in memory on the model as this run holds it:"
    ]
    by_task: dict[str, list[dict]] = {}
    for r in rows:
        by_task.setdefault(r["task"], []).append(r)
    for task, metrics in by_task.items():
        figures = ", ".join(
            f"{m['metric']} {m['value']:.4g}" + (f" ± {m['se']:.2g}" if m["se"] is not None else "") for m in metrics
        )
        n = metrics[0].get("n")
        shot = shots.get(task)
        out.append(
            f"{task}: {figures}"
            + (f" ({n:,} documents" if n else " (")
            + (f", {shot}-shot)" if shot is not None else ")")
            + "."
        )
    paired = result.tables.get("paired") or []
    if paired:
        parts = []
        for r in paired:
            beyond = abs(r["delta"]) > 2 * r["delta_se"]
            parts.append(
                f"{r['task']} {r['metric']} {r['delta']:+.4f} ± {r['delta_se']:.4f} ({r['changed']} of {r['n']} documents "
                f"changed{'; beyond two standard errors' if beyond else ''})"
            )
        out.append(
            f"Against {data.get('baseline', 'the unquantized model')} on the same documents (paired by document): "
            + "; ".join(parts)
            + "."
        )
    for task, chance in (data.get("chance") or {}).items():
        acc = next((r for r in by_task.get(task, []) if r["metric"] == "acc"), None)
        if chance is None or acc is None or acc["se"] is None:
            continue
        if abs(acc["value"] - chance) <= 2 * acc["se"]:
            out.append(
                f"{task}: accuracy {acc['value']:.3f} is within two standard errors of chance ({chance:.3f}): on this "
                "task the model answers no better than at random."
            )
    return out
