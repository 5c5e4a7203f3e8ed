"""The work of the robustness analyzer (its keys, checks and description: ``config.py``)."""

from __future__ import annotations

import torch

from modelxray.analyzers.robustness.config import RobustnessAnalyzer, image_shape_of
from modelxray.analyzers.robustness.insights import level_name
from modelxray.analyzers.robustness.rows import CLEAN_KEYS, draw_key, draws, grid, level_row, mean_row, record_rows
from modelxray.core.errors import ConfigError
from modelxray.core.progress import bar
from modelxray.core.result import Result, RunContext
from modelxray.kinds.base import choose, plurals
from modelxray.kinds.causal_lm import CausalLM
from modelxray.kinds.classifier import Classifier
from modelxray.kinds.image_text_to_text import ImageTextToText
from modelxray.kinds.labelled_images import LabelledImagesKind
from modelxray.kinds.speech import SpeechRecognizer
from modelxray.kinds.table import kind_of
from modelxray.kinds.windows import WindowsKind
from modelxray.metrics.windows import lm_eval_windows
from modelxray.perturb.weight_noise import (
    add_gaussian_noise_,
    add_quant_step_noise_,
    noise_targets,
)


def run(cfg, subject, ctx: RunContext) -> Result:
    if subject.stream is not None:  # block by block from disk: the weight families, in one read
        from modelxray.analyzers.robustness.streamed import run_streamed

        return run_streamed(cfg, subject, ctx)
    kind = kind_of(subject)
    harness = _harness(cfg, subject, kind, ctx)
    clean = harness.clean
    result = cfg.new_result()
    result.data.update(
        {"task": kind.task, "kind": kind.name, "quality": harness.quality, "clean": clean, "config": grid(cfg)}
    )
    result.data["attack_space"] = getattr(harness, "attack_space", "inputs")
    result.metrics.update({f"clean_{k}": clean[k] for k in CLEAN_KEYS if k in clean})
    if isinstance(kind, Classifier):  # a model at chance is "robust" to everything: say so first
        from modelxray.metrics.degenerate import COLLAPSE_SHARE, classifier_signs

        signs = classifier_signs(harness.clean_logp.cpu(), harness.y.cpu(), COLLAPSE_SHARE)
        if signs:
            result.data["degenerate"] = signs
    gen = draws(ctx)

    rows: list[dict] = []
    fgsm_eps, pgd_eps = cfg.fgsm_eps, cfg.pgd_eps
    if isinstance(kind, Classifier) and not torch.is_floating_point(subject.data.x_test):
        # integer inputs (modular arithmetic's (a, b) pairs): there is no input space to step in
        note = "inputs are integers, not features: input-space attacks and feature corruption do not apply"
        result.data["input_attacks"] = {"skipped": note}
        fgsm_eps, pgd_eps = [], []
    if isinstance(kind, SpeechRecognizer) and (fgsm_eps or pgd_eps):
        note = "inputs are audio: embedding-space attacks do not apply; noise, time shift and speed do"
        result.data["input_attacks"] = {"skipped": note}
        fgsm_eps, pgd_eps = [], []
    eps_union = sorted(set(fgsm_eps) | set(pgd_eps))
    if fgsm_eps:
        scale = harness.eps_scale
        result.data["eps_scale"] = scale
        attacks = harness.attack(fgsm_eps, 0, None, False, gen(1), harness.size, "robustness: FGSM")
        for eps, m in attacks.items():
            rows.append(level_row(kind, "fgsm", eps, m["fgsm"], clean, harness.size, eps_abs=eps * scale))
    if pgd_eps:
        scale = harness.eps_scale
        result.data["eps_scale"] = scale
        per_example = isinstance(kind, (Classifier, LabelledImagesKind))  # samples or images, not windows
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
            row = level_row(kind, "pgd", eps, m["pgd"], sub_clean, n, eps_abs=eps * scale)
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
                    kind,
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
                    kind,
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
            rows.append(_seeded(cfg, family, rate, clean, kind, harness, ctx, gen, None, None))
    rows.extend(_audio_corruptions(cfg, kind, harness, result, clean, ctx, gen))
    rows.extend(_image_corruptions(cfg, subject, kind, harness, result, clean, ctx, gen))

    record_rows(result, rows, harness.quality)
    return result


def _lm_harness(cfg, subject, kind, ctx: RunContext):
    from modelxray.perturb.lm_harness import LMHarness

    windows = lm_eval_windows(subject.data, subject.batches, cfg.eval_windows)
    return LMHarness(subject.model, windows, cfg.batch_size, cfg.kl_windows, ctx.progress, cfg.attack_batch_size)


def _classifier_harness(cfg, subject, kind, ctx: RunContext):
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


def _vision_task_harness(cfg, subject, kind, ctx: RunContext):
    from modelxray.perturb.vision_task_harness import VisionTaskHarness

    n = min(cfg.eval_samples or subject.data.n_examples, subject.data.n_examples)
    return VisionTaskHarness(subject, n, cfg.batch_size, cfg.vision_bootstrap, cfg.knn_k, cfg.occlusion_fill)


def _speech_harness(cfg, subject, kind, ctx: RunContext):
    from modelxray.perturb.speech_harness import SpeechHarness

    n = min(cfg.utterances, subject.data.n_examples)
    return SpeechHarness(subject.model, subject, n, cfg.batch_size, cfg.max_new_tokens, ctx.progress)


def _vision_language_harness(cfg, subject, kind, ctx: RunContext):
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


def _text_task_harness(cfg, subject, kind, ctx: RunContext):
    from modelxray.perturb.text_task_harness import TextTaskHarness

    if subject.data is None or not getattr(subject.data, "windows", None):
        raise ConfigError("analyzer.robustness", f"does not support task {kind.task!r}")
    return TextTaskHarness(
        subject.model,
        subject.data.windows[: cfg.eval_windows],
        kind,
        subject.tokenizer,
        cfg.batch_size,
        cfg.kl_windows,
        ctx.progress,
        cfg.attack_batch_size,
    )


# the harness that evaluates each kind's perturbations, by kind class (the most specific wins: a
# generative vision-language model is attacked in pixels, the other windows kinds in token embeddings)
_HARNESSES = {
    CausalLM: _lm_harness,
    Classifier: _classifier_harness,
    LabelledImagesKind: _vision_task_harness,
    SpeechRecognizer: _speech_harness,
    ImageTextToText: _vision_language_harness,
    WindowsKind: _text_task_harness,
}


def _harness(cfg, subject, kind, ctx: RunContext):
    build = choose(kind, _HARNESSES, "analyzer.robustness", f"analyzes {plurals(RobustnessAnalyzer.model_kinds)}")
    return build(cfg, subject, kind, ctx)


def _same_windows(fgsm: dict, clean: dict, quality: str) -> dict:
    """What a PGD row carries to be compared on its own windows: FGSM at the same eps and the clean
    metrics, both on exactly the windows (samples) PGD attacked."""
    out = {f"fgsm_{k}": fgsm[k] for k in ("loss", quality, "top1_agree", "loss_se", "top1_agree_se") if k in fgsm}
    if "accuracy" in fgsm and "accuracy" in clean:
        out["fgsm_accuracy"] = fgsm["accuracy"]
        out["fgsm_accuracy_drop"] = clean["accuracy"] - fgsm["accuracy"]
    out.update({f"clean_{k}": clean[k] for k in ("loss", quality) if k in clean})
    return out


def _audio_corruptions(cfg, kind, harness, result, clean, ctx, gen) -> list[dict]:
    """Noise at each signal-to-noise ratio, time shift and speed on a speech recogniser's audio
    (shift and speed are deterministic: one pass); nothing for other models."""
    if not isinstance(kind, SpeechRecognizer):
        return []
    from modelxray.perturb.speech_harness import RANDOM_FAMILIES

    levels = {"audio_noise": cfg.snr_db, "time_shift": cfg.time_shifts, "speed": cfg.speed_factors}
    result.data["audio_corruptions"] = {"levels": levels, "sample_rate": harness.rate}
    pairs = [(family, level) for family, lv in levels.items() for level in lv]
    return [
        _seeded(cfg, f, lv, clean, kind, harness, ctx, gen, None, None, seeds=None if f in RANDOM_FAMILIES else 1)
        for f, lv in bar(pairs, desc="robustness: audio corruptions", enabled=ctx.progress)
    ]


def _image_corruptions(cfg, subject, kind, harness, result, clean, ctx, gen) -> list[dict]:
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
        _seeded(cfg, family, level, clean, kind, harness, ctx, gen, None, None, seeds=1 if family == "blur" else None)
        for family, level in bar(pairs, desc="robustness: image corruptions", enabled=ctx.progress)
    ]


def _seeded(cfg, family, level, clean, kind, harness, ctx, gen, perturb, snapshot, seeds: int | None = None) -> dict:
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
    return mean_row(cfg, kind, family, level, runs, clean, harness)
