"""The work of the lm_eval analyzer (its keys, checks and description: ``config.py``): lm-eval's
``simple_evaluate`` on the subject's model and tokenizer as they are in memory (quantized when the run
quantized them), wrapped in lm-eval's own ``HFLM``, so the scores are lm-eval's, request for request."""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator

from modelxray.analyzers.lm_eval.tasks_check import load_tasks, task_manager
from modelxray.core.result import Result, RunContext
from modelxray.measure.scoring import model_device


def evaluate(cfg, model, tokenizer, seed: int) -> dict:
    """lm-eval's ``simple_evaluate`` of ``cfg.tasks`` on ``model`` and ``tokenizer`` as they are in
    memory (lm-eval's own ``HFLM`` around them), every document's scores logged."""
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM

    manager = task_manager(cfg)
    load_tasks(cfg, manager)  # the hub out of reach: the cache, or one line
    lm = HFLM(
        pretrained=model,
        tokenizer=tokenizer,
        batch_size=cfg.batch_size,
        max_length=cfg.max_length,
        device=str(model_device(model)),
    )
    with _bootstrap_in_process():
        return simple_evaluate(
            model=lm,
            tasks=list(cfg.tasks),
            num_fewshot=cfg.num_fewshot,
            limit=cfg.limit,
            task_manager=manager,
            log_samples=True,
            apply_chat_template=cfg.apply_chat_template,
            gen_kwargs=dict(cfg.gen_kwargs) if cfg.gen_kwargs else None,
            bootstrap_iters=cfg.bootstrap_iters,
            random_seed=seed,
            numpy_random_seed=seed,
            torch_random_seed=seed,
            fewshot_random_seed=seed,
        )


@contextlib.contextmanager
def _bootstrap_in_process() -> Iterator[None]:
    """lm-eval bootstraps a metric's standard error in a pool of forked processes unless
    ``DISABLE_MULTIPROC`` is set; forked from a run's process (torch's, MLflow's and the progress
    bars' threads) a pool worker can hang at the pool's end, and the run with it. The resamples are
    drawn in this process instead: the same figures, a second or two for the largest task."""
    previous = os.environ.get("DISABLE_MULTIPROC")
    os.environ["DISABLE_MULTIPROC"] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("DISABLE_MULTIPROC", None)
        else:
            os.environ["DISABLE_MULTIPROC"] = previous


# per process: every document's scores by (model, settings), so the jobs of a sweep score the
# unquantized model once (the quant=none job's scores are the others' baseline)
_DOCUMENTS: dict[tuple, dict] = {}


def _key(cfg, model, seed: int) -> tuple:
    """The model (every tensor's sum and size: a quantized copy differs) and what lm-eval runs."""
    import torch

    with torch.no_grad():
        fingerprint = tuple(
            (p.numel(), None if p.is_meta else float(p.detach().sum(dtype=torch.float64))) for p in model.parameters()
        )
    settings = (tuple(cfg.tasks), cfg.limit, cfg.num_fewshot, cfg.batch_size, cfg.max_length)
    return (fingerprint, settings, cfg.apply_chat_template, repr(cfg.gen_kwargs), cfg.include_path, seed)


def baseline(cfg, subject, seed: int) -> dict:
    """What the analyzer keeps of the model before ``quant=`` changes it: every document's scores
    (from this process's earlier run of the same model and tasks, when there was one)."""
    key = _key(cfg, subject.model, seed)
    if key not in _DOCUMENTS:
        _DOCUMENTS[key] = per_document(evaluate(cfg, subject.model, subject.tokenizer, seed))
    return {"label": "the unquantized model", "documents": _DOCUMENTS[key]}


def run(cfg, subject, ctx: RunContext) -> Result:
    out = evaluate(cfg, subject.model, subject.tokenizer, ctx.seed)
    if not subject.applied:  # the model as loaded: a later job's baseline (quantized ones never are)
        _DOCUMENTS[_key(cfg, subject.model, ctx.seed)] = per_document(out)
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
            "versions": dict(out.get("versions") or {}),
            "n_shot": out.get("n-shot") or {},
            "lm_eval_version": _version(),
            "limit": cfg.limit,
            "chance": {task: _chance(logged) for task, logged in samples.items()},
        }
    )
    base = subject.reference_baselines.get(cfg.name)
    if base is not None:
        paired = paired_rows(base["documents"], per_document(out))
        result.tables["paired"] = paired
        result.data["baseline"] = base["label"]
        for row in paired:
            result.metrics[f"{row['task']}/{row['metric']}_delta"] = row["delta"]
            result.metrics[f"{row['task']}/{row['metric']}_delta_se"] = row["delta_se"]
    return result


def per_document(out: dict) -> dict[str, dict[int, dict[str, float]]]:
    """Each task's per-document scores (the metrics lm-eval averages: acc, acc_norm, exact_match ...)
    by document id, from the logged samples."""
    docs: dict[str, dict[int, dict[str, float]]] = {}
    for task, logged in (out.get("samples") or {}).items():
        results = (out.get("results") or {}).get(task, {})
        metrics = [m for m in (out.get("higher_is_better") or {}).get(task, {}) if _is_mean(m, logged, results)]
        for sample in logged:
            scores = {m: float(sample[m]) for m in metrics if isinstance(sample.get(m), (int, float, bool))}
            if scores:
                docs.setdefault(task, {})[int(sample["doc_id"])] = scores
    return docs


def _is_mean(metric: str, logged: list[dict], results: dict) -> bool:
    """Whether the task's figure for ``metric`` is the mean of its documents' values (acc, acc_norm,
    exact_match: pairable by document; a perplexity over summed log-likelihoods is not)."""
    values = [s.get(metric) for s in logged]
    total = results.get(f"{metric},none")
    if not values or not all(isinstance(v, (int, float, bool)) for v in values) or not isinstance(total, (int, float)):
        return False
    return math.isclose(sum(float(v) for v in values) / len(values), float(total), rel_tol=1e-9, abs_tol=1e-12)


def paired_rows(base: dict, mine: dict) -> list[dict]:
    """Per task and metric, the mean of this model's score minus the baseline's on the same documents,
    with the standard error of that mean (documents as units), and how many documents changed answer."""
    import statistics

    rows = []
    for task, docs in mine.items():
        shared = sorted(set(docs) & set(base.get(task, {})))
        if len(shared) < 2:
            continue
        for metric in docs[shared[0]]:
            pairs = [(docs[d][metric], base[task][d][metric]) for d in shared if metric in base[task][d]]
            if len(pairs) < 2:
                continue
            diffs = [a - b for a, b in pairs]
            rows.append(
                {
                    "task": task,
                    "metric": metric,
                    "value": statistics.fmean(a for a, _ in pairs),
                    "baseline": statistics.fmean(b for _, b in pairs),
                    "delta": statistics.fmean(diffs),
                    "delta_se": statistics.stdev(diffs) / math.sqrt(len(diffs)),
                    "changed": sum(1 for d in diffs if d != 0),
                    "n": len(diffs),
                }
            )
    return rows


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
