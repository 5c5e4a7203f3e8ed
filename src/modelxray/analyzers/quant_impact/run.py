"""The work of the quant_impact analyzer (its keys, checks and description: ``config.py``)."""

from __future__ import annotations

import gc
import math
import time
import traceback

import torch

from modelxray.analyzers.quant_impact.config import PRIORITIES, load_strategy, strategy_name
from modelxray.core.errors import ConfigError, MissingLibrary
from modelxray.core.progress import bar
from modelxray.core.result import Result, RunContext
from modelxray.kinds.causal_lm import CausalLM
from modelxray.kinds.classifier import Classifier
from modelxray.kinds.labelled_images import LabelledImagesKind
from modelxray.kinds.table import kind_of
from modelxray.measure.hardware import hardware_profile
from modelxray.measure.memory_timeline import MemoryTimeline
from modelxray.measure.reference import Reference
from modelxray.measure.scoring import model_device
from modelxray.measure.speed import StopRule, time_forward
from modelxray.metrics.agreement import outside_agreement_bounds
from modelxray.metrics.measurements import Latency
from modelxray.metrics.tensor_bytes import tensor_bytes_by_dtype
from modelxray.metrics.windows import NamedTensors, lm_eval_windows, speed_inputs, stack_inputs


def efficiency_scores(rows: list[dict], priority: str) -> list[float]:
    """Weighted geometric mean of quality (baseline ppl / ppl), speed (tokens/s vs baseline) and memory
    (baseline bytes / bytes), each capped at the best strategy's value: 1.0 = best on every axis."""
    wq, ws, wm = PRIORITIES[priority]
    axes = [(r["quality_ratio"], r["speed_ratio"], r["memory_ratio"]) for r in rows]
    best = [max(a[i] for a in axes) or 1.0 for i in range(3)]
    return [math.exp(sum(w * math.log(max(a[i] / best[i], 1e-9)) for i, w in enumerate((wq, ws, wm)))) for a in axes]


def _perplexity_name(subject) -> str:
    """What a perplexity measures on the subject's kind ("masked-token perplexity"), plain perplexity by default."""
    return kind_of(subject).perplexity_name


def _vision_columns(subject) -> tuple[str, ...]:
    """A detector's, segmenter's or backbone's own quality columns."""
    return kind_of(subject).quality_columns


# what every strategy costs and saves, logged per strategy for every kind of model
COST_KEYS = (
    "inference_time",
    "memory_used_gb",
    "weight_bytes",
    "stored_bytes",
    "peak_quantize_rss",
    "peak_inference_rss",
    "quantize_seconds",
    "quality_per_gb",
)

# a language model's quality columns per strategy: loss and perplexity, and agreement with the baseline
LM_QUALITY_KEYS = (
    *("loss", "loss_se", "perplexity", "delta_loss", "delta_loss_se"),
    *("kl", "kl_se", "kl_p90", "kl_p99", "kl_p999", "kl_max", "rms_dp", "top1_agree", "top1_agree_se"),
)


class _Mode:
    """What differs between a language model and a classifier: the reference, the speed batch, the
    quality columns and axis, the throughput unit and the metrics logged per strategy."""

    timed = True  # speed measured (not on a model streamed from disk)
    ranking = None  # an lm-eval task metric ranking the strategies (rank_by_task), else the quality above

    @classmethod
    def streamed(cls, subject) -> _Mode:
        """A language model streamed block by block: its reference is the float path of the strategies'
        one stream (set by ``streamed.streamed_rows``), and no speed is measured."""
        mode = cls.__new__(cls)
        mode.vision = mode.classifier = mode.zero_shot = False
        mode.timed = False
        mode.quality_keys = LM_QUALITY_KEYS
        mode.throughput, mode.unit = "tokens_per_s", "tokens/s"
        mode.quality = _perplexity_name(subject)
        return mode

    def __init__(self, cfg, subject, ctx: RunContext):
        kind = kind_of(subject)
        self.vision = isinstance(kind, LabelledImagesKind)
        self.classifier = isinstance(kind, Classifier) or self.vision  # one score per example
        device = model_device(subject.model)
        if self.vision:
            self._vision(cfg, subject)
        elif self.classifier:
            from modelxray.measure.classifier_reference import QUALITY_KEYS, ClassifierReference, is_zero_shot

            self.ref = ClassifierReference(
                subject.model,
                subject.data,
                cfg.eval_examples,
                cfg.eval_batch_size,
                ctx.progress,
                "quant_impact: reference",
            )
            self.quality_keys = QUALITY_KEYS
            self.throughput = "examples_per_s"
            self.unit = "examples/s"
            self.zero_shot = is_zero_shot(subject.model)
            self.quality = "zero-shot accuracy" if self.zero_shot else "accuracy"
        else:
            windows = lm_eval_windows(subject.data, subject.batches, cfg.eval_windows)
            given = subject.reference_baselines.get(cfg.name)  # reference=: another model is the baseline
            self.ref = given or Reference(
                subject.model, windows, cfg.batch_size, cfg.kl_windows, ctx.progress, "quant_impact: reference"
            )
            if isinstance(windows[0].inputs, NamedTensors):  # a text or speech task: its own examples
                self.lm_batch = stack_inputs(windows, cfg.speed_batch_size).to(device)
            else:
                ids = torch.cat([w.inputs for w in windows])  # the scored tokens, cycled to fill the speed batch
                self.lm_batch = speed_inputs(ids, cfg.speed_batch_size, windows[0].inputs.numel()).to(device)
            self.quality_keys = LM_QUALITY_KEYS
            self.throughput = "tokens_per_s"
            self.unit = "tokens/s"
            self.zero_shot = False
            self.quality = _perplexity_name(subject)

    def _vision(self, cfg, subject) -> None:
        """A detector, segmenter or backbone, scored like a classifier: ``accuracy`` is the task's
        quality (mAP@.5, mean IoU, k-NN accuracy) and ``top1_agree`` its agreement with the
        unquantized outputs (mAP@.5 against its top detections, pixel agreement, 1 - cosine drift)."""
        from modelxray.perturb.vision_task_harness import VisionTaskHarness

        n = min(cfg.eval_examples, subject.data.n_examples)
        self.ref = VisionTaskHarness(subject, n, cfg.eval_batch_size, 0, cfg.knn_k, "mid")
        self.ref.n = n
        self.ref.metrics = self.ref.clean  # what the results record as the reference
        self.quality_keys = ("accuracy", "top1_agree", *_vision_columns(subject))
        self.throughput, self.unit, self.zero_shot = "examples_per_s", "images/s", False
        self.quality = self.ref.quality_name

    def scoring(self) -> dict:
        """How the strategies were scored, as insights.md says it (``insights.py``): one score per
        example (a classifier, a vision task) or a perplexity, the speed column and its unit, and the
        test examples a classifier is scored on."""
        out = {"classifier": self.classifier, "throughput": self.throughput, "unit": self.unit}
        if self.classifier:
            out["examples"] = self.ref.n
        return out

    def evaluate(self, model, progress: bool, desc: str) -> dict:
        if self.vision:
            return self.ref.evaluate_as_classifier(model, desc)
        return self.ref.evaluate(model, progress=progress, desc=desc)

    def speed_batch(self, model, batch_size: int):
        if self.vision:
            images = self.ref.images
            idx = torch.arange(batch_size) % images.shape[0]
            return images[idx].to(model_device(model))
        return self.ref.speed_batch(model, batch_size) if self.classifier else self.lm_batch

    def quality_ratio(self, base: dict, row: dict) -> float:
        """Quality relative to the baseline, higher is better: accuracy / baseline accuracy for a
        classifier, baseline perplexity / perplexity for a language model."""
        if self.ranking is not None:  # the task's metric: higher or lower is better, as lm-eval says
            mine, theirs = row["task_score"], base["task_score"]
            if row.get("task_higher_is_better", True) is False:
                mine, theirs = theirs, mine
            return mine / theirs if theirs > 0 else float(mine > 0)
        if self.classifier:
            return row["accuracy"] / base["accuracy"] if base["accuracy"] > 0 else float(row["accuracy"] > 0)
        return base["perplexity"] / row["perplexity"]

    def metric_keys(self, priority: str) -> tuple[str, ...]:
        """The per-strategy columns logged to MLflow as ``<strategy>_<key>``: quality (with its errors
        for a language model), then speed, size and the score, shared by every kind."""
        if self.vision:
            quality = ("accuracy", "top1_agree", "latency_p50_ms", "examples_per_s")
        elif self.classifier:
            quality = ("accuracy", "loss", "kl", "top1_agree", "latency_p50_ms", "examples_per_s")
        else:
            quality = (
                *("perplexity", "loss", "loss_se", "delta_loss", "delta_loss_se", "accuracy"),
                *("kl", "kl_se", "kl_p90", "kl_p99", "kl_p999", "kl_max", "rms_dp", "top1_agree", "top1_agree_se"),
                *("latency_p50_ms", "tokens_per_s"),
            )
        ranked = ("task_score", "task_score_se") if self.ranking is not None else ()
        return (*quality, *ranked, *COST_KEYS, f"score_{priority}")


def run(cfg, subject, ctx: RunContext) -> Result:
    if subject.data is None and subject.batches is None:
        raise ConfigError(
            "analyzer.quant_impact",
            "needs token windows: a text dataset (dataset=...) or a DataLoader of token batches",
        )
    profile = hardware_profile()
    if subject.stream is not None:  # block by block from disk: every strategy in one read of the model
        from modelxray.analyzers.quant_impact.streamed import streamed_rows

        mode = _Mode.streamed(subject)
        rows, unsupported, failures, timelines, streaming = streamed_rows(cfg, subject, ctx, mode, profile)
        return _finish(cfg, subject, mode, profile, rows, timelines, unsupported, failures, None, [], streaming)
    mode = _Mode(cfg, subject, ctx)
    if isinstance(kind_of(subject), CausalLM):
        mode.ranking = cfg.ranking()
    device = model_device(subject.model)
    rows, timelines, unsupported, in_place = [], [], [], []
    failures: dict[str, str] = {}  # strategy -> traceback
    float_speed = FloatSpeed(cfg, subject, mode)
    originals = None  # the model's tensors as loaded, for the strategies that quantize it in place
    try:
        for requested in bar(cfg.strategies, desc="quant_impact: strategies", enabled=ctx.progress):
            name = strategy_name(requested)
            try:
                quantizer = load_strategy(name)
            except MissingLibrary as exc:
                unsupported.append({"strategy": name, "reason": str(exc)})
                continue
            ok, why = quantizer.support_here(profile)
            reason = None if ok else why
            if reason is None:
                if quantizer.in_place_capable and originals is None:
                    originals = ctx.keep_originals(subject.model)
                if quantizer.in_place_capable:
                    in_place.append(name)
                try:
                    rows.append(_measure(cfg, name, quantizer, why, subject, mode, device, timelines, ctx, float_speed))
                except ConfigError as exc:  # the quantizer refuses this model (one line): list it, go on
                    reason = str(exc)
                except Exception as exc:  # noqa: BLE001 - one strategy failing never loses the others
                    reason = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                    failures[name] = traceback.format_exc()
                finally:
                    if quantizer.in_place_capable:
                        originals.restore()
            if reason is not None:
                unsupported.append({"strategy": name, "reason": reason})
            gc.collect()
    finally:
        if originals is not None:
            originals.close()
    return _finish(cfg, subject, mode, profile, rows, timelines, unsupported, failures, originals, in_place)


def _finish(cfg, subject, mode, profile, rows, timelines, unsupported, failures, originals, in_place, streaming=None):
    """The Result of the measured ``rows``: ratios to the baseline, scores per priority, budgets,
    agreement bounds and the recommendation (``streaming``: what streaming the model cost)."""
    base = next((r for r in rows if r["strategy"] == "none"), rows[0] if rows else None)
    result = cfg.new_result()
    result.data.update(
        {
            "hardware": profile,
            "unsupported": unsupported,
            "priority": cfg.priority,
            "reference": mode.ref.metrics,
            "baseline": getattr(mode.ref, "label", "the unquantized model"),  # reference=: the other model
            "task": subject.task,
            "quality_metric": mode.quality,
            "scoring": mode.scoring(),
            "fragmentation_share": cfg.fragmentation_share,
        }
    )
    if subject.load_memory:  # what loading the model cost, before any strategy ran
        result.data["load_memory"] = subject.load_memory
        result.metrics["load_seconds"] = subject.load_memory["seconds"]
        result.metrics["load_peak_rss_bytes"] = subject.load_memory["peak_rss"]
    if originals is not None:  # where the strategies that quantize in place found the weights again
        result.data["original_weights"] = originals.describe()
        result.data["in_place"] = in_place
    if streaming is not None:
        result.data["streaming"] = streaming
    if mode.ranking is not None:
        result.data["ranked_by"] = mode.ranking.label
    result.tables["unsupported"] = unsupported
    for name, trace in failures.items():
        result.texts[f"quant_impact_{name}_traceback.txt"] = trace
    if not rows:
        return result
    for r in rows:
        r["quality_ratio"] = mode.quality_ratio(base, r)
        r["speed_ratio"] = r[mode.throughput] / base[mode.throughput] if mode.timed else 1.0  # not measured
        r["memory_ratio"] = base["weight_bytes"] / r["weight_bytes"]
        r["memory_saved_bytes"] = base["weight_bytes"] - r["weight_bytes"]
        r["quality_per_gb"] = r["quality_ratio"] / (r["weight_bytes"] / 2**30)
        r["inference_overhead_bytes"] = r["peak_inference_rss"] - r["rss_after_quantize"]
        r["quantize_overhead_bytes"] = r["peak_quantize_rss"] - r["rss_at_load"]
    for priority in PRIORITIES:
        for r, score in zip(rows, efficiency_scores(rows, priority)):
            r[f"score_{priority}"] = score
    for r in rows:
        r["efficiency_score"] = r[f"score_{cfg.priority}"]  # summary field: the score of the run's priority
    result.tables["strategies"] = rows
    result.tables["memory_timeline"] = timelines
    for r in rows:
        for k in mode.metric_keys(cfg.priority):
            result.metrics[f"{r['strategy']}_{k}"] = r[k]
    budget = {k: v for k, v in (("max_memory_gb", cfg.max_memory_gb), ("max_latency_ms", cfg.max_latency_ms)) if v}
    if budget:
        for r in rows:
            r["within_budget"] = within_budget(r, budget)
        result.data["budget"] = budget
    for r in rows:  # outputs that moved too far from the baseline are never recommended, whatever their score
        r["fidelity_broken"] = fidelity_broken(r, cfg.agreement_floor, cfg.kl_ceiling)
    result.data["fidelity"] = {"agreement_floor": cfg.agreement_floor, "kl_ceiling": cfg.kl_ceiling}
    allowed = [r for r in rows if r.get("within_budget", True) and not r["fidelity_broken"]]
    result.data["recommendations"] = _recommend(cfg, allowed, profile, mode)
    result.texts.update(_export(rows, timelines))
    return result


class FloatSpeed:
    """One timing of the unquantized float model, taken on first use and shared by every strategy
    that runs it: ``none`` and the simulated ones (fake-quantized weights in the same float layers).
    Timing each of them apart would only rank them by timing noise."""

    def __init__(self, cfg, subject, mode: _Mode):
        self.cfg, self.subject, self.mode = cfg, subject, mode
        self._value: tuple[list[float], int] | None = None

    def get(self) -> tuple[list[float], int]:
        """Seconds per timed forward pass, and the examples (or tokens) in one pass."""
        if self._value is None:
            model = self.subject.model
            batch = self.mode.speed_batch(model, self.cfg.speed_batch_size)
            times = time_forward(model, batch, self.cfg.warmup, StopRule.of(self.cfg), progress=False)
            self._value = (times, batch.shape[0] if self.mode.classifier else batch.numel())
        return self._value


def _measure(cfg, name, quantizer, support, subject, mode, device, timelines, ctx, float_speed: FloatSpeed) -> dict:
    with MemoryTimeline(cfg.memory_interval_ms / 1000, device) as tl:
        with tl.phase("load"):
            pass  # the model is already loaded: this marks the baseline level
        start = time.perf_counter()
        with tl.phase("quantize"):
            qsubject, report = quantizer.apply(subject, progress=ctx.progress, in_place=quantizer.in_place_capable)
        quantize_s = time.perf_counter() - start
        after_quantize = tl.samples[-1].rss
        with tl.phase("inference"):
            m = mode.evaluate(qsubject.model, progress=ctx.progress, desc=f"quant_impact: {name}")
            if mode.ranking is not None:  # the task the strategies are ranked by, on this quantized model
                task = mode.ranking.score(qsubject.model, subject.tokenizer, ctx.seed)
                m = {**m, "task_score": task["value"], "task_score_se": task["se"]}
                m["task_higher_is_better"] = task["higher_is_better"]
            shares_float = name == "none" or "simulated" in support
            if shares_float:
                times, per_pass = float_speed.get()
            else:
                batch = mode.speed_batch(qsubject.model, cfg.speed_batch_size)
                times = time_forward(qsubject.model, batch, cfg.warmup, StopRule.of(cfg), progress=False)
                per_pass = batch.shape[0] if mode.classifier else batch.numel()
    stored = sum(sum(d.values()) for d in tensor_bytes_by_dtype(qsubject.model).values())
    weight_bytes = report.metrics["model_bytes_after"] if report is not None else stored
    lat = Latency.from_values(times)
    for s in tl.rows():
        timelines.append({"strategy": name, **s})
    row = {
        "strategy": name,
        "method": (report.data.get("method") if report else "none"),
        "support": support,
        "simulated": "simulated" in support,
        "speed_measured": "float model, shared" if shares_float else "own",
        **{k: m.get(k, float("nan")) for k in mode.quality_keys},
        **{k: m[k] for k in ("task_score", "task_score_se", "task_higher_is_better") if k in m},
        "latency_p50_ms": lat.p50_ms,
        "latency_p95_ms": lat.p95_ms,
        mode.throughput: per_pass / lat.mean_s,
        "weight_bytes": weight_bytes,
        "stored_bytes": stored,
        "effective_bits": report.metrics["effective_bits"] if report is not None else 32.0,
        "rss_at_load": tl.peak("load"),
        "peak_quantize_rss": tl.peak("quantize"),
        "rss_after_quantize": after_quantize,
        "peak_inference_rss": tl.peak("inference"),
        "quantize_seconds": quantize_s,
        # the summary fields: weights' memory in GiB (weight_bytes / 2**30, as quality_per_gb), quality,
        # seconds per timed batch of speed_batch_size
        "memory_used_gb": weight_bytes / 2**30,
        "accuracy": m["accuracy"],
        "inference_time": lat.mean_s,
    }
    if device.type == "cuda":
        stats = torch.cuda.memory_stats(device)
        row.update(
            {
                "cuda_peak_reserved": tl.peak("inference", "cuda_reserved"),
                "cuda_peak_allocated": tl.peak("inference", "cuda_allocated"),
                "cuda_fragmentation_bytes": torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device),
                "cuda_inactive_split_bytes": stats.get("inactive_split_bytes.all.current", 0),
            }
        )
    del qsubject
    return row


def fidelity_broken(row: dict, agreement_floor: float, kl_ceiling: float) -> list[str]:
    """What keeps a strategy from being recommended however it scores (``outside_agreement_bounds``)."""
    return outside_agreement_bounds(row, agreement_floor, kl_ceiling)


def within_budget(row: dict, budget: dict) -> bool:
    """The strategy's weights fit ``max_memory_gb`` (2^30 bytes) and its median latency ``max_latency_ms``."""
    if "max_memory_gb" in budget and row["weight_bytes"] / 2**30 > budget["max_memory_gb"]:
        return False
    return not ("max_latency_ms" in budget and row["latency_p50_ms"] > budget["max_latency_ms"])


def _recommend(cfg, rows: list[dict], profile: dict, mode: _Mode) -> dict:
    """The best strategy for each priority among ``rows`` (those within the budget); {} when none is."""
    if not rows:
        return {}
    out = {}
    for priority in PRIORITIES:
        best = max(rows, key=lambda r: r[f"score_{priority}"])
        out[priority] = {
            "strategy": best["strategy"],
            "score": best[f"score_{priority}"],
            **({"accuracy": best["accuracy"]} if mode.classifier else {"perplexity": best["perplexity"]}),
            "weight_mb": best["weight_bytes"] / 2**20,
        }
    return out


def _export(rows: list[dict], timelines: list[dict]) -> dict[str, str]:
    """The strategy table and the memory timeline as CSV files of the run (written by the report)."""
    import pandas as pd

    return {
        "quant_impact_strategies.csv": pd.DataFrame(rows).to_csv(index=False),
        "quant_impact_memory_timeline.csv": pd.DataFrame(timelines).to_csv(index=False),
    }
