"""The robustness analyzer's observations (insights.md): input attacks that do not apply, the first
level of each family that costs more than `degradation_tolerance` (10%) of quality, PGD that finds much more than FGSM, where
the noised weights were restored from, and image corruptions skipped on feature vectors. Pure
functions of the Result (its table and data, as saved in ``results/robustness.json``) and the
analyzer's config, so a reloaded Result says the same. Also how rows are named (``level_name``,
``count_key``), which the work shares."""

from __future__ import annotations

import math

from modelxray.analyzers.robustness.config import IMAGE_KEYS
from modelxray.core.result import Result
from modelxray.models.kinds import VISION_TASKS

LOWER_IS_BETTER = ("perplexity", "wer")  # headline metrics that grow as quality falls


def insights(result: Result, results: dict[str, Result], cfg) -> list[str]:
    """Every sentence, in the order of insights.md; none for a failed result."""
    if not result.ok:
        return []
    d, out = result.data, []
    note = (d.get("input_attacks") or {}).get("skipped")
    if note:  # integer features keep the weight families; audio keeps its own corruptions
        tail = "." if d["task"] == "speech_recognition" else "; weight and quantization noise still do."
        out.append(note[0].upper() + note[1:] + tail)
    rows = result.tables.get("robustness") or []
    out += level_insights(rows, d["clean"], d["quality"], count_key(d["task"]), cfg.degradation_tolerance)
    if "original_weights" in d:
        out.append(f"Memory: {d['original_weights']}")
    skipped = (d.get("image_corruptions") or {}).get("skipped")
    if skipped and d["task"] == "classification" and any(getattr(cfg, k) is None for k in IMAGE_KEYS.values()):
        out.append(skipped + ".")  # a classifier whose data are feature vectors
    return out


def level_name(family: str, level: float) -> str:
    return f"{int(level)}bit" if family == "quant_noise" else f"{level:g}"


def count_key(task: str) -> str:
    """The column saying what each row was measured on: ``windows`` of a text model's examples,
    ``samples`` of a classifier's test set, ``utterances`` of a speech recogniser's audio."""
    if task in VISION_TASKS:
        return "images"
    return {"classification": "samples", "speech_recognition": "utterances"}.get(task, "windows")


# what the level of an image corruption means, said in the insights
_UNITS = {
    "gaussian_noise": "noise std, pixel units",
    "blur": "blur std, pixels",
    "occlusion": "patch side / image side",
    "audio_noise": "signal-to-noise ratio, dB",
    "time_shift": "seconds",
    "speed": "playback speed factor",
}


def level_insights(rows: list[dict], clean: dict, quality: str, unit: str, tolerance: float = 0.1) -> list[str]:
    """Plain sentences: the first level of each family that costs more than ``tolerance`` (a share;
    for WER an absolute rate) of quality against
    the clean value of the same windows (samples), saying how many, and whether PGD finds much more
    than FGSM on its windows (a gradient-masking or linearity signal)."""
    out = []
    for family in dict.fromkeys(r["family"] for r in rows):
        fam = [r for r in rows if r["family"] == family and quality in r and not math.isnan(r[quality])]
        if family in ("quant_noise", "audio_noise"):  # from the mildest: most bits, highest SNR
            fam = sorted(fam, key=lambda r: -r["level"])
        elif family == "speed":
            fam = sorted(fam, key=lambda r: abs(r["level"] - 1.0))
        elif family in _UNITS:
            fam = sorted(fam, key=lambda r: r["level"])
        if not fam:
            continue
        base = fam[0].get(f"clean_{quality}", clean[quality])  # PGD: the clean value of its own windows
        if quality == "wer":  # an error rate: 0.1 more of the words, not 10% of a small rate
            worse = lambda v, b=base: v > b + tolerance  # noqa: E731
        elif quality in LOWER_IS_BETTER:
            worse = lambda v, b=base: v > (1 + tolerance) * b  # noqa: E731
        else:
            worse = lambda v, b=base: v < b - tolerance * abs(b)  # noqa: E731
        n = int(fam[0].get(unit, 0))
        on = f" ({n} {unit if n != 1 else unit[:-1]})" if n else ""
        unit_note = f" ({_UNITS[family]})" if family in _UNITS else ""
        first = next((r for r in fam if worse(r[quality])), None)
        if first is None:
            out.append(
                f"{family}: {quality} stays within {f'{tolerance:g}' if quality == 'wer' else f'{tolerance:.0%}'} of clean ({base:.3g}) up to level "
                f"{level_name(family, fam[-1]['level'])}{unit_note}{on}."
            )
        else:
            out.append(
                f"{family}: {quality} {first[quality]:.3g} vs clean {base:.3g} from level "
                f"{level_name(family, first['level'])}{unit_note}{on}."
            )
    for r in rows:
        if r["family"] == "pgd" and quality == "perplexity" and "fgsm_perplexity" in r:
            ratio = r["perplexity"] / r["fgsm_perplexity"]
            if ratio > 1.1:
                n = int(r.get(unit, 0))
                out.append(
                    f"PGD-eps {r['level']:g} reaches perplexity {r['perplexity']:.3g} where FGSM reaches "
                    f"{r['fgsm_perplexity']:.3g} on the same {n} {unit if n != 1 else unit[:-1]}: the loss "
                    "surface is far from linear there."
                )
    return out
