"""The runs of an experiment (or of one sweep) as a pandas DataFrame, for notebooks and reports.

One row per run: ``run_id``, ``status``, ``start_time``, ``run_name``, the resolved config values
(MLflow params, parsed back to numbers, booleans and lists) under their dotted keys
(``dataset.max_tokens``, group choices such as ``quant``) and the final value of every metric
(``performance/perplexity``). HydraFlow's ``RunCollection`` is the peer: it reads a local file
store's saved ``.hydra/config.yaml``; this reads any tracking URI (SQLite, a server) through the
MLflow API, whose params are already the resolved config.

    runs = load_runs("sqlite:///mlflow.db", "modelxray")
    runs.filter(quant=["int4", "int8"]).group_by("quant")
    runs.pareto("quant/model_bytes_after", "performance/perplexity")
    runs.artifact(run_id, "summary_report.md")    # a local path to that artifact
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd

from modelxray.metrics.pareto import pareto_front
from modelxray.tracking.redact import redact_text

SUMMARY_TAG = "modelxray.summary"  # comparison runs logged by scripts/compare_runs.py


def parse_param(value: str) -> Any:
    """An MLflow param string back to the YAML value it was (``8192`` -> 8192, ``[1, 4]`` -> [1, 4])."""
    import yaml

    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    return parsed if isinstance(parsed, (int, float, bool, list, dict, type(None))) else value


@dataclass
class RunCollection:
    frame: pd.DataFrame
    uri: str
    experiment: str

    def __len__(self) -> int:
        return len(self.frame)

    def __iter__(self) -> Iterator[dict]:
        return iter(self.frame.to_dict("records"))

    @property
    def run_ids(self) -> list[str]:
        return list(self.frame["run_id"])

    def filter(self, conditions: dict[str, Any] | None = None, **kwargs: Any) -> RunCollection:
        """Keep the runs matching every condition: a value, a list of values, a ``(lo, hi)`` range
        (inclusive) or a predicate. Dotted keys go in ``conditions`` or as keyword arguments with
        ``__`` for ``.`` (``dataset__max_tokens=2048``)."""
        conds = {**(conditions or {}), **{k.replace("__", "."): v for k, v in kwargs.items()}}
        mask = pd.Series(True, index=self.frame.index)
        for key, want in conds.items():
            if key not in self.frame:
                raise KeyError(f"no column {key!r}; columns: {', '.join(self.frame.columns[:20])}...")
            col = self.frame[key]
            if callable(want):
                mask &= col.map(want).astype(bool)
            elif isinstance(want, tuple) and len(want) == 2:
                mask &= col.between(*want)
            elif isinstance(want, list):
                mask &= col.map(lambda v, w=want: v in w)
            else:
                mask &= col.map(lambda v, w=want: v == w)
        return RunCollection(self.frame[mask], self.uri, self.experiment)

    def group_by(self, *keys: str) -> dict[Any, RunCollection]:
        """Runs grouped by the values of ``keys`` (one key: the value; several: a tuple)."""
        frame = self.frame.assign(**{f"__{k}": self.frame[k].map(_hashable) for k in keys})
        out = {}
        for value, sub in frame.groupby([f"__{k}" for k in keys], sort=True, dropna=False):
            out[value[0] if len(keys) == 1 else value] = RunCollection(
                sub.drop(columns=[f"__{k}" for k in keys]), self.uri, self.experiment
            )
        return out

    def to_frame(self, *columns: str) -> pd.DataFrame:
        return self.frame[["run_id", *columns]] if columns else self.frame

    def pareto(self, x: str, y: str, maximize: tuple[str, ...] = ()) -> list[str]:
        """Run ids on the Pareto front of metrics ``x`` and ``y`` (minimised unless in ``maximize``)."""
        sub = self.frame.dropna(subset=[x, y])
        sign = {k: (-1.0 if k in maximize else 1.0) for k in (x, y)}
        points = [(sign[x] * float(a), sign[y] * float(b)) for a, b in zip(sub[x], sub[y])]
        return [sub["run_id"].iloc[i] for i in pareto_front(points)]

    def history(self, metric: str, *columns: str) -> pd.DataFrame:
        """The step-indexed history of ``metric`` for every run: one row per (run, step) with ``step``,
        ``value`` and the given config ``columns`` (e.g. ``experiment``), to overlay training curves."""
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=self.uri)
        rows = []
        for rec in self:
            for m in client.get_metric_history(rec["run_id"], metric):
                rows.append(
                    {"run_id": rec["run_id"], **{c: rec.get(c) for c in columns}, "step": m.step, "value": m.value}
                )
        frame = pd.DataFrame(rows, columns=["run_id", *columns, "step", "value"])
        return frame.sort_values(["run_id", "step"]).reset_index(drop=True)

    def artifact(self, run_id: str, path: str = "") -> str:
        """A local path to an artifact (or the artifact root) of a run, downloaded if remote."""
        from mlflow.artifacts import download_artifacts

        return download_artifacts(run_id=run_id, artifact_path=path or None, tracking_uri=self.uri)


def _hashable(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def load_runs(
    uri: str,
    experiment: str,
    *,
    sweep_id: str | None = None,
    status: str | list[str] | None = None,
    include_summaries: bool = False,
    where: Callable[[Any], bool] | None = None,
) -> RunCollection:
    """Every run of ``experiment`` at ``uri`` (one sweep with ``sweep_id``), oldest first."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise KeyError(f"no MLflow experiment {experiment!r} at {redact_text(uri)}")
    filters = []
    if sweep_id:
        filters.append(f"tags.`modelxray.sweep_id` = '{sweep_id}'")
    runs = client.search_runs([exp.experiment_id], filter_string=" and ".join(filters), max_results=50000)
    if sweep_id:  # and the FINISHED runs of earlier sweeps whose configs this one skipped
        from modelxray.tracking.sweep_runs import reused_filter

        seen = {r.info.run_id for r in runs}
        reused = client.search_runs([exp.experiment_id], filter_string=reused_filter(sweep_id), max_results=50000)
        runs = [*runs, *(r for r in reused if r.info.run_id not in seen)]
    statuses = [status] if isinstance(status, str) else status
    rows = []
    for r in sorted(runs, key=lambda r: r.info.start_time):
        if not include_summaries and r.data.tags.get(SUMMARY_TAG):
            continue
        if statuses and r.info.status not in statuses:
            continue
        if where is not None and not where(r):
            continue
        rows.append(
            {
                "run_id": r.info.run_id,
                "status": r.info.status,
                "run_name": r.info.run_name,
                "start_time": pd.Timestamp(r.info.start_time, unit="ms"),
                # what the run's metrics mean (a language model's accuracy is per token, a classifier's per image)
                "kind": r.data.tags.get("modelxray.kind") or r.data.tags.get("modelxray.task"),
                "sweep_id": r.data.tags.get("modelxray.sweep_id"),
                **{k: parse_param(v) for k, v in r.data.params.items()},
                **r.data.metrics,
            }
        )
    return RunCollection(pd.DataFrame(rows), uri, experiment)
