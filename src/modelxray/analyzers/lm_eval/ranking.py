"""An lm-eval task metric as the quality another analyzer ranks by (``quant_impact.rank_by_task``,
``bitwidth.rank_by_task``): ``<task>/<metric>`` (``pydoc_topic_mc/acc``), checked before the model
loads, and scored on each quantized model in memory with lm-eval's own code."""

from __future__ import annotations

from dataclasses import dataclass

from modelxray.core.errors import ConfigError


@dataclass
class TaskRanking:
    task: str
    metric: str
    limit: float | None
    batch_size: int

    @property
    def label(self) -> str:
        return f"{self.task}/{self.metric}"

    def config(self):
        from modelxray.analyzers.lm_eval.config import LmEvalAnalyzer

        return LmEvalAnalyzer(tasks=[self.task], limit=self.limit, batch_size=self.batch_size)

    def score(self, model, tokenizer, seed: int) -> dict:
        """``{"value", "se", "n", "higher_is_better"}`` of the metric on ``model``."""
        from modelxray.core.configurable import implementation

        run = implementation("modelxray.analyzers.lm_eval.run")  # named, so configs never import the work
        rows = [r for r in run.task_rows(run.evaluate(self.config(), model, tokenizer, seed)) if r["task"] == self.task]
        for row in rows:
            if row["metric"] == self.metric:
                return {k: row[k] for k in ("value", "se", "n", "higher_is_better")}
        raise ConfigError(
            "rank_by_task", f"{self.task} gives {', '.join(r['metric'] for r in rows)}, not {self.metric!r}"
        )


def task_ranking(spec: str | None, limit: float | None, batch_size: int) -> TaskRanking | None:
    """``<task>/<metric>`` as a ``TaskRanking`` whose task lm-eval knows (one line otherwise); None: none."""
    if spec is None:
        return None
    task, _, metric = str(spec).partition("/")
    if not task or not metric:
        raise ConfigError("rank_by_task", f"must be <task>/<metric>, e.g. pydoc_topic_mc/acc; got {spec!r}")
    ranking = TaskRanking(task, metric, limit, batch_size)
    try:
        cfg = ranking.config()  # lm-eval installed, the task known and its documents readable
    except ConfigError as exc:
        raise ConfigError("task_limit" if exc.key.endswith("limit") else "rank_by_task", exc.message) from None
    from modelxray.analyzers.lm_eval.tasks_check import load_tasks, task_manager

    found = load_tasks(cfg, task_manager(cfg)).get(task)
    metrics = list(found.aggregation()) if hasattr(found, "aggregation") else None
    if metrics is not None and metric not in metrics:
        raise ConfigError("rank_by_task", f"{task} gives {', '.join(metrics)}, not {metric!r}")
    return ranking
