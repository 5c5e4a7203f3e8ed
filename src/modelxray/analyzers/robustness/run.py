"""The work of the robustness analyzer (its keys, checks and description: ``config.py``)."""

from __future__ import annotations

import math
import statistics
import zlib

import numpy as np
import torch

from modelxray.analyzers.robustness.config import IMAGE_KEYS, VISION_KEYS, image_shape_of
from modelxray.analyzers.robustness.insights import count_key, level_name
from modelxray.core.errors import ConfigError
from modelxray.core.progress import bar
from modelxray.core.result import Result, RunContext
from modelxray.metrics.measurements import Quality
from modelxray.metrics.windows import lm_eval_windows
from modelxray.models.kinds import VISION_TASKS
from modelxray.perturb.weight_noise import (
    add_gaussian_noise_,
    add_quant_step_noise_,
    noise_targets,
)

# per family: the metrics logged for each level (the rest stay in the tables), and their standard
# errors where the harness measures them (language models: windows as units)
_LOGGED = ("loss", "perplexity", "accuracy", "top1_agree", "kl", "gap", "wer", "cer", "transcript_change", *VISION_KEYS)
_ERRORS = (
    "loss_se",
    "accuracy_se",
    "top1_agree_se",
    "kl_se",
    "gap_se",
    "wer_se",
    "cer_se",
    "transcript_change_se",
    "map_se",
    "map_50_se",
    "miou_se",
)
CLEAN_KEYS = ("loss", "perplexity", "accuracy", "wer", "cer", "map", "map_50", "miou", "pixel_accuracy", "knn_accuracy")


def run(cfg, subject, ctx: RunContext) -> Result:
    if subject.stream is not None:  # block by block from disk: the weight families, in one read
        from modelxray.analyzers.robustness.streamed import run_streamed

        return run_streamed(cfg, subject, ctx)
    harness = _harness(cfg, subject, ctx)
    clean = harness.clean
    result = cfg.new_result()
    result.data.update({"task": harness.task, "quality": harness.quality, "clean": clean, "config": grid(cfg)})
    result.data["attack_space"] = getattr(harness, "attack_space", "inputs")
    result.metrics.update({f"clean_{k}": clean[k] for k in CLEAN_KEYS if k in clean})
    if harness.task == "classification":  # a model at chance is "robust" to everything: say so first
        from modelxray.metrics.degenerate import COLLAPSE_SHARE, classifier_signs

        signs = classifier_signs(harness.clean_logp.cpu(), harness.y.cpu(), COLLAPSE_SHARE)
        if signs:
            result.data["degenerate"] = signs
    gen = draws(ctx)

    rows: list[dict] = []
    fgsm_eps, pgd_eps = cfg.fgsm_eps, cfg.pgd_eps
    if harness.task == "classification" and not torch.is_floating_point(subject.data.x_test):
        # integer inputs (modular arithmetic's (a, b) pairs): there is no input space to step in
        note = "inputs are integers, not features: input-space attacks and feature corruption do not apply"
        result.data["input_attacks"] = {"skipped": note}
        fgsm_eps, pgd_eps = [], []
    if harness.task == "speech_recognition" and (fgsm_eps or pgd_eps):
        note = "inputs are audio: embedding-space attacks do not apply; noise, time shift and speed do"
        result.data["input_attacks"] = {"skipped": note}
        fgsm_eps, pgd_eps = [], []
    eps_union = sorted(set(fgsm_eps) | set(pgd_eps))
    if fgsm_eps:
        scale = harness.eps_scale
        result.data["eps_scale"] = scale
        attacks = harness.attack(fgsm_eps, 0, None, False, gen(1), harness.size, "robustness: FGSM")
        for eps, m in attacks.items():
            rows.append(_row(harness, "fgsm", eps, m["fgsm"], clean, harness.size, eps_abs=eps * scale))
    if pgd_eps:
        scale = harness.eps_scale
        result.data["eps_scale"] = scale
        per_example = harness.task in ("classification", *VISION_TASKS)  # samples or images, not windows
        n = min(cfg.pgd_samples or harness.size if per_example else cfg.pgd_windows, harness.size)
        sub_clean = harness.clean_of(n)
        attacks = harness.attack(
            pgd_eps,
            cfg.pgd_steps,
            cfg.pgd_step_size,
            cfg.pgd_random_start,
            gen(2),
            n,
            f"robustness: PGD-{cfg.pgd_steps}",
        )
        for eps, m in attacks.items():
            row = _row(harness, "pgd", eps, m["pgd"], sub_clean, n, eps_abs=eps * scale)
            row.update(_same_windows(m["fgsm"], sub_clean, harness.quality))
            rows.append(row)
    result.data["eps_grid"] = eps_union

    targets = noise_targets(subject.model, cfg.noise_targets)
    result.data["noise_targets"] = {
        "set": cfg.noise_targets,
        "tensors": len(targets),
        "parameters": sum(t.param.numel() for t in targets),
    }
    snapshot = ctx.keep_originals(subject.model, [t.name for t in targets])
    result.data["original_weights"] = snapshot.describe()  # where the noised weights were restored from
    try:
        for level in bar(cfg.weight_noise_levels, desc="robustness: weight noise", enabled=ctx.progress):
            rows.append(
                _seeded(
                    cfg,
                    "weight_noise",
                    level,
                    clean,
                    harness,
                    ctx,
                    gen,
                    lambda g, lv=level: add_gaussian_noise_(targets, lv, g),
                    snapshot,
                )
            )
        for bits in bar(cfg.quant_noise_bits, desc="robustness: quantization noise", enabled=ctx.progress):
            rows.append(
                _seeded(
                    cfg,
                    "quant_noise",
                    bits,
                    clean,
                    harness,
                    ctx,
                    gen,
                    lambda g, b=bits: add_quant_step_noise_(targets, b, g, cfg.quant_noise_granularity),
                    snapshot,
                )
            )
    finally:
        snapshot.restore()
        snapshot.close()
    for family, rates in (
        (harness.dropout_family, cfg.dropout_rates),
        (harness.substitution_family, cfg.substitution_rates),
    ):
        if family is None or "input_attacks" in result.data:
            continue
        for rate in rates:
            rows.append(_seeded(cfg, family, rate, clean, harness, ctx, gen, None, None))
    rows.extend(_audio_corruptions(cfg, harness, result, clean, ctx, gen))
    rows.extend(_image_corruptions(cfg, subject, harness, result, clean, ctx, gen))

    record_rows(result, rows, harness.quality)
    return result


def record_rows(result: Result, rows: list[dict], quality: str) -> None:
    """The table of every family and level, and its metrics (``<family>_<level>_<key>``)."""
    result.tables["robustness"] = rows
    for r in rows:
        prefix = f"{r['family']}_{level_name(r['family'], r['level'])}"
        for k in (*_LOGGED, *_ERRORS, f"{quality}_std", "fgsm_" + quality):
            if k in r and r[k] is not None and not (isinstance(r[k], float) and math.isnan(r[k])):
                result.metrics[f"{prefix}_{k}"] = r[k]


def draws(ctx: RunContext):
    """``gen(k)``: the generator of draw ``k`` of this run's seed."""
    return lambda k: torch.Generator().manual_seed(ctx.seed * 1_000_003 + k)


def draw_key(family: str, level, seed: int) -> int:
    """The draw of one seed of one family and level (the same in memory and streamed)."""
    return zlib.crc32(f"{family}:{level}".encode()) * 100 + seed + 10


# -- helpers ------------------------------------------------------------------------------------
def _harness(cfg, subject, ctx: RunContext):
    if subject.task == "causal_lm":
        from modelxray.perturb.lm_harness import LMHarness

        windows = lm_eval_windows(subject.data, subject.batches, cfg.eval_windows)
        return LMHarness(subject.model, windows, cfg.batch_size, cfg.kl_windows, ctx.progress, cfg.attack_batch_size)
    if subject.task == "classification":
        from modelxray.data.base import ClassificationData
        from modelxray.perturb.classifier_harness import ClassifierHarness

        data = subject.data
        if not isinstance(data, ClassificationData):
            raise ConfigError("dataset", "a classifier needs a classification dataset, e.g. dataset=digits")
        n = cfg.eval_samples or data.n_samples
        return ClassifierHarness(
            subject.model,
            data.x_test[:n],
            data.y_test[:n],
            data.feature_range,
            cfg.sample_batch_size,
            ctx.progress,
            image_shape=image_shape_of(subject),
            occlusion_fill=cfg.occlusion_fill,
        )
    if subject.task in VISION_TASKS:
        from modelxray.perturb.vision_task_harness import VisionTaskHarness

        n = min(cfg.eval_samples or subject.data.n_examples, subject.data.n_examples)
        return VisionTaskHarness(subject, n, cfg.batch_size, cfg.vision_bootstrap, cfg.knn_k, cfg.occlusion_fill)
    if subject.task == "speech_recognition":
        from modelxray.perturb.speech_harness import SpeechHarness

        n = min(cfg.utterances, subject.data.n_examples)
        return SpeechHarness(subject.model, subject, n, cfg.batch_size, cfg.max_new_tokens, ctx.progress)
    if subject.task == "image_text_to_text":
        from modelxray.perturb.vision_language_harness import VisionLanguageHarness

        return VisionLanguageHarness(
            subject.model,
            subject.data.windows[: cfg.eval_windows],
            subject.tokenizer,
            subject.processor,
            cfg.batch_size,
            cfg.kl_windows,
            ctx.progress,
            cfg.attack_batch_size,
        )
    if subject.data is not None and getattr(subject.data, "windows", None):
        from modelxray.perturb.text_task_harness import TextTaskHarness

        windows = subject.data.windows[: cfg.eval_windows]
        return TextTaskHarness(
            subject.model,
            windows,
            subject.task,
            subject.tokenizer,
            cfg.batch_size,
            cfg.kl_windows,
            ctx.progress,
            cfg.attack_batch_size,
        )
    raise ConfigError("analyzer.robustness", f"does not support task {subject.task!r}")


def _row(harness, family: str, level: float, m: dict, clean: dict, n: int, **extra) -> dict:
    """One family and level measured on ``n`` windows (classifiers: samples) against ``clean``, the
    clean metrics of the same ``n``; standard errors where the harness measured them (``gap_se``:
    of the paired per-window loss change)."""
    row = {
        "family": family,
        "level": level,
        count_key(harness.task): n,
        **{k: m.get(k) for k in ("loss", "perplexity", "accuracy", "top1_agree", "kl", "tokens_scored")},
        **{k: m.get(k) for k in ("wer", "cer", "transcript_change", *VISION_KEYS)},
        **{k: m.get(k) for k in _ERRORS if k != "gap_se"},
        "gap_se": m.get("delta_loss_se"),
        **extra,
    }
    row = {k: v for k, v in row.items() if v is not None}
    if "loss" in m and "loss" in clean:
        row["gap"] = m["loss"] - clean["loss"]
    if "accuracy" in m and "accuracy" in clean:
        row["accuracy_drop"] = clean["accuracy"] - m["accuracy"]
    if harness.task == "classification" and "accuracy_se" not in row and n > 0 and "accuracy" in row:
        # independent test samples: the binomial standard error of a share
        p = row["accuracy"]
        row["accuracy_se"] = math.sqrt(max(p * (1 - p), 0.0) / n)
    return row


def _same_windows(fgsm: dict, clean: dict, quality: str) -> dict:
    """What a PGD row carries to be compared on its own windows: FGSM at the same eps and the clean
    metrics, both on exactly the windows (samples) PGD attacked."""
    out = {f"fgsm_{k}": fgsm[k] for k in ("loss", quality, "top1_agree", "loss_se", "top1_agree_se") if k in fgsm}
    if "accuracy" in fgsm and "accuracy" in clean:
        out["fgsm_accuracy"] = fgsm["accuracy"]
        out["fgsm_accuracy_drop"] = clean["accuracy"] - fgsm["accuracy"]
    out.update({f"clean_{k}": clean[k] for k in ("loss", quality) if k in clean})
    return out


def _audio_corruptions(cfg, harness, result, clean, ctx, gen) -> list[dict]:
    """Noise at each signal-to-noise ratio, time shift and speed on a speech recogniser's audio
    (shift and speed are deterministic: one pass); nothing for other models."""
    if harness.task != "speech_recognition":
        return []
    from modelxray.perturb.speech_harness import RANDOM_FAMILIES

    levels = {"audio_noise": cfg.snr_db, "time_shift": cfg.time_shifts, "speed": cfg.speed_factors}
    result.data["audio_corruptions"] = {"levels": levels, "sample_rate": harness.rate}
    pairs = [(family, level) for family, lv in levels.items() for level in lv]
    return [
        _seeded(cfg, f, lv, clean, harness, ctx, gen, None, None, seeds=None if f in RANDOM_FAMILIES else 1)
        for f, lv in bar(pairs, desc="robustness: audio corruptions", enabled=ctx.progress)
    ]


def _image_corruptions(cfg, subject, harness, result, clean, ctx, gen) -> list[dict]:
    """Gaussian noise, blur and occlusion at each level on image data (blur is deterministic: one
    pass); elsewhere a note in ``result.data`` says why they were skipped."""
    levels, note = cfg.image_levels(subject)
    if note is not None:
        result.data["image_corruptions"] = {"skipped": note}
        return []
    result.data["image_corruptions"] = {
        "image_shape": list(harness.image_shape),
        "levels": levels,
        "occlusion_value": harness.occlusion_value,
    }
    pairs = [(family, level) for family, lv in levels.items() for level in lv]
    return [
        _seeded(cfg, family, level, clean, harness, ctx, gen, None, None, seeds=1 if family == "blur" else None)
        for family, level in bar(pairs, desc="robustness: image corruptions", enabled=ctx.progress)
    ]


def _seeded(cfg, family, level, clean, harness, ctx, gen, perturb, snapshot, seeds: int | None = None) -> dict:
    """Mean over ``seeds`` draws (default: ``cfg.seeds``; the spread as ``*_std``) of a random perturbation."""
    runs = []
    for seed in range(cfg.seeds if seeds is None else seeds):
        g = gen(draw_key(family, level, seed))
        desc = f"robustness: {family} {level_name(family, level)} (seed {seed})"
        if perturb is not None:
            perturb(g)
            try:
                runs.append(harness.evaluate(desc))
            finally:
                snapshot.restore()
        else:
            runs.append(harness.perturb_inputs(family, level, g, desc))
    return mean_row(cfg, family, level, runs, clean, harness)


def mean_row(cfg, family, level, runs, clean, harness) -> dict:
    """The mean over seeds of one family and level, with the spread (``*_std``) and each seed's value."""
    keys = [k for k in runs[0] if all(isinstance(r.get(k), (int, float)) for r in runs)]
    mean = {k: statistics.fmean(r[k] for r in runs) for k in keys}
    q = harness.quality
    if q == "perplexity" and "loss" in mean:
        # perplexity of the mean loss over seeds, not the mean perplexity: the geometric mean
        mean["perplexity"] = Quality(loss=mean["loss"]).perplexity
    row = _row(harness, family, level, mean, clean, harness.size, seeds=len(runs))
    row[f"{q}_std"] = _std([r[q] for r in runs])
    if all("loss" in r for r in runs):
        row["loss_std"] = _std([r["loss"] for r in runs])
    row["per_seed_" + q] = [r[q] for r in runs]
    return row


def grid(cfg) -> dict:
    return {
        "fgsm_eps": cfg.fgsm_eps,
        "pgd_eps": cfg.pgd_eps,
        "pgd_steps": cfg.pgd_steps,
        "weight_noise_levels": cfg.weight_noise_levels,
        "quant_noise_bits": cfg.quant_noise_bits,
        "dropout_rates": cfg.dropout_rates,
        "substitution_rates": cfg.substitution_rates,
        **{key: getattr(cfg, key) for key in IMAGE_KEYS.values()},
        "occlusion_fill": cfg.occlusion_fill,
        "image_grid": cfg.image_grid,
        "snr_db": cfg.snr_db,
        "time_shifts": cfg.time_shifts,
        "speed_factors": cfg.speed_factors,
        "seeds": cfg.seeds,
    }


def _std(values: list[float]) -> float:
    """Sample std over seeds (0 for one seed; NaN when a value is, e.g. nothing was left to score)."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
