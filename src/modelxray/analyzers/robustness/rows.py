"""What the robustness analyzer's rows are, in memory and streamed alike: one family and level measured
against the clean pass (``level_row``), the mean over seeds (``mean_row``), the draws each seed's
perturbation takes, the keys logged per level, and the table and metrics of the Result."""

from __future__ import annotations

import math
import statistics
import zlib

import numpy as np
import torch

from modelxray.analyzers.robustness.config import IMAGE_KEYS, VISION_KEYS
from modelxray.analyzers.robustness.insights import count_key, level_name
from modelxray.core.result import Result, RunContext
from modelxray.kinds.classifier import Classifier
from modelxray.metrics.measurements import Quality

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
def level_row(kind, family: str, level: float, m: dict, clean: dict, n: int, **extra) -> dict:
    """One family and level measured on ``n`` windows (classifiers: samples) of a ``kind`` model
    against ``clean``, the clean metrics of the same ``n``; standard errors where the harness
    measured them (``gap_se``: of the paired per-window loss change)."""
    row = {
        "family": family,
        "level": level,
        count_key(kind): n,
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
    if isinstance(kind, Classifier) and "accuracy_se" not in row and n > 0 and "accuracy" in row:
        # independent test samples: the binomial standard error of a share
        p = row["accuracy"]
        row["accuracy_se"] = math.sqrt(max(p * (1 - p), 0.0) / n)
    return row


def mean_row(cfg, kind, family, level, runs, clean, harness) -> dict:
    """The mean over seeds of one family and level of a ``kind`` model, with the spread (``*_std``)
    and each seed's value."""
    keys = [k for k in runs[0] if all(isinstance(r.get(k), (int, float)) for r in runs)]
    mean = {k: statistics.fmean(r[k] for r in runs) for k in keys}
    q = harness.quality
    if q == "perplexity" and "loss" in mean:
        # perplexity of the mean loss over seeds, not the mean perplexity: the geometric mean
        mean["perplexity"] = Quality(loss=mean["loss"]).perplexity
    row = level_row(kind, family, level, mean, clean, harness.size, seeds=len(runs))
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
