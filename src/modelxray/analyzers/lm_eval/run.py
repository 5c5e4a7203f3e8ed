"""The work of the lm_eval analyzer (its keys, checks and description: ``config.py``): lm-eval's
``simple_evaluate`` on the subject's model and tokenizer as they are in memory (quantized when the run
quantized them), wrapped in lm-eval's own ``HFLM``, so the scores are lm-eval's, request for request."""

from __future__ import annotations

import json
import math

from modelxray.analyzers.lm_eval.tasks_check import load_tasks, task_manager
from modelxray.core.result import Result, RunContext
from modelxray.measure.scoring import model_device


def run(cfg, subject, ctx: RunContext) -> Result:
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM

    manager = task_manager(cfg)
    load_tasks(cfg, manager)  # the hub out of reach: the cache, or one line
    lm = HFLM(
        pretrained=subject.model,
        tokenizer=subject.tokenizer,
        batch_size=cfg.batch_size,
        max_length=cfg.max_length,
        device=str(model_device(subject.model)),
    )
    out = simple_evaluate(
        model=lm,
        tasks=list(cfg.tasks),
        num_fewshot=cfg.num_fewshot,
        limit=cfg.limit,
        task_manager=manager,
        log_samples=True,
        apply_chat_template=cfg.apply_chat_template,
        gen_kwargs=dict(cfg.gen_kwargs) if cfg.gen_kwargs else None,
        bootstrap_iters=cfg.bootstrap_iters,
        random_seed=ctx.seed,
        numpy_random_seed=ctx.seed,
        torch_random_seed=ctx.seed,
        fewshot_random_seed=ctx.seed,
    )
    result = cfg.new_result()
    rows = task_rows(out)
    result.tables["tasks"] = rows
    for row in rows:
        result.metrics[f"{row['task']}/{row['metric']}"] = row["value"]
        if row["se"] is not None:
            result.metrics[f"{row['task']}/{row['metric']}_se"] = row["se"]
    samples = out.get("samples") or {}
    result.texts["lm_eval_samples.jsonl"] = "".join(
        json.dumps({"task": task, **sample}, default=str) + "\n"
        for task, logged in samples.items()
        for sample in logged
    )
    result.data.update(
        {
            "versions": {k: v for k, v in (out.get("versions") or {}).items()},
            "n_shot": out.get("n-shot") or {},
            "lm_eval_version": _version(),
            "limit": cfg.limit,
            "chance": {task: _chance(logged) for task, logged in samples.items()},
        }
    )
    return result


def task_rows(out: dict) -> list[dict]:
    """One row per task and metric of lm-eval's results: its value, lm-eval's standard error (None
    where it gives none), the documents scored and whether higher is better."""
    rows = []
    counts = out.get("n-samples") or {}
    better = out.get("higher_is_better") or {}
    for task, metrics in (out.get("results") or {}).items():
        n = (counts.get(task) or {}).get("effective")
        for key, value in metrics.items():
            if "," not in key or "_stderr," in key or not isinstance(value, (int, float)):
                continue
            metric, filt = key.split(",", 1)
            se = metrics.get(f"{metric}_stderr,{filt}")
            rows.append(
                {
                    "task": task,
                    "metric": metric if filt == "none" else f"{metric}_{filt}",
                    "value": float(value),
                    "se": float(se) if isinstance(se, (int, float)) and math.isfinite(se) else None,
                    "n": n,
                    "higher_is_better": (better.get(task) or {}).get(metric),
                }
            )
    return rows


def _chance(samples: list[dict]) -> float | None:
    """A multiple-choice task's accuracy at random: the mean of 1 / choices over its documents."""
    counts = [len(s.get("arguments") or []) for s in samples]
    if not counts or min(counts) < 2 or any("acc" not in s for s in samples):
        return None
    return sum(1 / c for c in counts) / len(counts)


def _version() -> str:
    from importlib.metadata import version

    return version("lm-eval")
