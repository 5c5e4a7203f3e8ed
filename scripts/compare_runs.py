"""Print the runs of an MLflow experiment side by side as a Markdown table.

    python scripts/compare_runs.py --experiment modelxray \\
        --params quant --metrics performance/perplexity,quant/model_bytes_after,performance/bs1_latency_p50_ms

    python scripts/compare_runs.py --params quant --metrics 'robustness/fgsm_*_perplexity,robustness/clean_perplexity'

Columns: the chosen params, then the chosen metrics (``*_bytes`` metrics shown in MiB; a ``*`` in a
key matches any text, expanded over the metrics the runs logged); one row per run, oldest first. ``--uri`` defaults to ``sqlite:///mlflow.db`` in the working directory.
"""
from __future__ import annotations

import argparse


def fmt(key: str, value) -> str:
    if value is None:
        return "-"
    if key.endswith("_bytes") or key.endswith("bytes_after") or key.endswith("bytes_before"):
        return f"{value / 2**20:,.1f} MiB"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e5 else f"{value:,.0f}"
    return str(value)


def expand(keys: list[str], logged: list[dict]) -> list[str]:
    """Keys with ``*`` become every logged metric they match, in sorted order."""
    import fnmatch

    names = sorted({k for m in logged for k in m})
    out: list[str] = []
    for key in keys:
        for k in (fnmatch.filter(names, key) if "*" in key else [key]):
            if k not in out:
                out.append(k)
    return out


def table(uri: str, experiment: str, params: list[str], metrics: list[str]) -> str:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise SystemExit(f"compare_runs: no experiment {experiment!r} at {uri}")
    runs = sorted(client.search_runs([exp.experiment_id], max_results=10000), key=lambda r: r.info.start_time)
    metrics = expand(metrics, [r.data.metrics for r in runs])
    head = ["run", *params, *metrics, "status"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in runs:
        cells = [r.info.run_id[:8], *(r.data.params.get(p, "-") for p in params),
                 *(fmt(m, r.data.metrics.get(m)) for m in metrics), r.info.status]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--uri", default="sqlite:///mlflow.db")
    ap.add_argument("--experiment", default="modelxray")
    ap.add_argument("--params", default="quant", help="comma-separated param keys")
    ap.add_argument("--metrics", default="performance/perplexity", help="comma-separated metric keys")
    args = ap.parse_args()
    print(table(args.uri, args.experiment, [p for p in args.params.split(",") if p],
                [m for m in args.metrics.split(",") if m]))


if __name__ == "__main__":
    main()
