"""The robustness analyzer's observations (insights.md): input attacks that do not apply, each
family's verdict (the first level out of bounds, and the bound that decided: quality more than
`degradation_tolerance` (10%) from clean, agreement with the clean outputs below `agreement_floor`,
KL above `kl_ceiling`), PGD that finds much more than FGSM, why PGD stops before FGSM's strongest
radius, where the noised weights were restored from, and image corruptions skipped on feature
vectors. Pure functions of the Result (its table and data, as saved in ``results/robustness.json``)
and the analyzer's config, so a reloaded Result says the same. Also how rows are named
(``level_name``, ``count_key``), which the work shares."""

from __future__ import annotations

from modelxray.analyzers.robustness.config import IMAGE_KEYS
from modelxray.analyzers.robustness.summary import agreement_of, base_of, kl_of, series, tolerance_text, verdict
from modelxray.core.result import Result
from modelxray.kinds.base import Kind
from modelxray.kinds.classifier import Classifier
from modelxray.kinds.speech import SpeechRecognizer
from modelxray.kinds.table import saved_kind


def insights(result: Result, results: dict[str, Result], cfg) -> list[str]:
    """Every sentence, in the order of insights.md; none for a failed result."""
    if not result.ok:
        return []
    d, out = result.data, []
    kind = saved_kind(d)
    note = (d.get("input_attacks") or {}).get("skipped")
    if note:  # integer features keep the weight families; audio keeps its own corruptions
        tail = "." if isinstance(kind, SpeechRecognizer) else "; weight and quantization noise still do."
        out.append(note[0].upper() + note[1:] + tail)
    rows = result.tables.get("robustness") or []
    out += level_insights(rows, d["clean"], d["quality"], count_key(kind), cfg)
    pgd = pgd_short_note(rows, d.get("config") or {}, count_key(kind))
    if pgd:
        out.append(pgd)
    if "original_weights" in d:
        out.append(f"Memory: {d['original_weights']}")
    if d.get("streaming"):
        s = d["streaming"]
        out.append(
            f"Streamed from disk block by block: {s['paths']} noisy copies (every level and seed) in {s['reads']} "
            f"read{'s' * (s['reads'] != 1)} of the model ({s['weight_reads']:.2f} times its weights), each tensor "
            "noised as its block was read with the noise an in-memory run draws."
        )
    skipped = (d.get("image_corruptions") or {}).get("skipped")
    if skipped and isinstance(kind, Classifier) and any(getattr(cfg, k) is None for k in IMAGE_KEYS.values()):
        out.append(skipped + ".")  # a classifier whose data are feature vectors
    return out


def pgd_short_note(rows: list[dict], config: dict, unit: str) -> str | None:
    """Why the PGD series stops before FGSM's strongest radius, or None when it does not: PGD runs at
    ``pgd_eps`` only (its own, shorter grid: each level takes ``pgd_steps`` gradient steps per window
    or sample where FGSM takes one), so a plot that ends its PGD line early says so instead of
    leaving it to be read as a failure."""
    pgd = sorted({r["level"] for r in rows if r["family"] == "pgd"})
    beyond = sorted({r["level"] for r in rows if r["family"] == "fgsm" and pgd and r["level"] > pgd[-1]})
    if not beyond:
        return None
    steps = config.get("pgd_steps")
    name, levels = (f"PGD-{steps}" if steps else "PGD"), _and([f"{e:g}" for e in beyond])
    ran = f"{name} ran at eps {_and([f'{e:g}' for e in pgd])} only, FGSM also at {levels}"
    asked = config.get("pgd_eps")
    if asked is None or any(e in asked for e in beyond):  # asked for and not there: say no more than that
        return f"{ran}: PGD has no result at {levels}."
    cost = f"each PGD level takes {steps} gradient steps per {unit[:-1]} where FGSM takes one" if steps else ""
    return (
        f"{ran}: analyzer.robustness.pgd_eps stops at {pgd[-1]:g}"
        + (f" ({cost})" if cost else "")
        + f"; add {levels} to it to run PGD there too."
    )


def _and(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def level_name(family: str, level: float) -> str:
    return f"{int(level)}bit" if family == "quant_noise" else f"{level:g}"


def count_key(kind: Kind | None) -> str:
    """The column saying what each row was measured on: ``windows`` of a text model's examples,
    ``samples`` of a classifier's test set, ``utterances`` of a speech recogniser's audio,
    ``images`` of a detector's, segmenter's or backbone's (the kind's ``counted_in``)."""
    return kind.counted_in if kind is not None else "windows"


# what the level of an image corruption means, said in the insights
_UNITS = {
    "gaussian_noise": "noise std, pixel units",
    "blur": "blur std, pixels",
    "occlusion": "patch side / image side",
    "audio_noise": "signal-to-noise ratio, dB",
    "time_shift": "seconds",
    "speed": "playback speed factor",
}


def level_insights(rows: list[dict], clean: dict, quality: str, unit: str, cfg) -> list[str]:
    """Plain sentences: per family, the verdict on three bounds (``cfg``'s keys): quality may move
    ``degradation_tolerance`` (a share; for WER an absolute rate) from the clean value of the same
    windows (samples), agreement with the clean outputs may not fall below ``agreement_floor`` and
    KL(clean || perturbed), where measured, may not exceed ``kl_ceiling``. A family is within bounds
    up to its strongest level, or out of bounds from its first level that breaks one, naming the
    bound(s) that decided; with how many windows (samples) it was measured on. Then whether PGD
    finds much more than FGSM on its windows (a gradient-masking or linearity signal)."""
    out = []
    tol = tolerance_text(quality, cfg.degradation_tolerance)
    for name, (fam, _) in series(rows, quality).items():
        family = fam[0]["family"]
        base = base_of(fam, clean, quality)
        n = int(fam[0].get(unit, 0))
        on = f" ({n} {unit if n != 1 else unit[:-1]})" if n else ""
        unit_note = f" ({_UNITS[family]})" if family in _UNITS else ""
        first, broken = verdict(fam, base, quality, cfg)
        if first is None:
            agree = [a for a in (agreement_of(r)[0] for r in fam) if a is not None]
            kls = [k for k in (kl_of(r) for r in fam) if k is not None]
            bounds = [f"{quality} stays within {tol} of clean ({base:.3g})"]
            bounds.append(
                f"agreement with the clean outputs at least {min(agree):.3g} (floor {cfg.agreement_floor:g})"
                if agree
                else "agreement not measured"
            )
            if kls:
                bounds.append(f"KL at most {max(kls):.3g} (ceiling {cfg.kl_ceiling:g})")
            out.append(
                f"{name}: within bounds up to level {level_name(family, fam[-1]['level'])}{unit_note}{on}: "
                + _and(bounds)
                + "."
            )
            continue
        kept = (
            "" if "quality" in broken else f" ({quality} {first[quality]:.3g} stays within {tol} of clean {base:.3g})"
        )
        out.append(
            f"{name}: out of bounds from level {level_name(family, first['level'])}{unit_note}{on}, decided by "
            + _and(list(broken.values()))
            + kept
            + "."
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
