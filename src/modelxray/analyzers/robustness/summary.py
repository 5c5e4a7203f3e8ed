"""The robustness analyzer's summary, read from its Result alone (a reloaded Result says the same):
one row per perturbation family with the strength at which quality halves (interpolated between
the measured levels, with its uncertainty from their standard errors) and the strongest level's
quality, agreement with the clean predictions and KL; and the verdict of each family (the first
level out of bounds), where quality, agreement and KL each have a bound and the verdict names the
one that decided.

Quality "halves": an accuracy (mAP, mean IoU, k-NN accuracy) falls to half its clean value, a
perplexity doubles (its inverse halves, as in quant_impact's quality ratio), a word error rate
leaves half the clean share of words right (WER reaches (1 + clean WER) / 2)."""

from __future__ import annotations

import math

LOWER_IS_BETTER = ("perplexity", "wer")  # headline metrics that grow as quality falls
# families whose strength grows as the level falls (fewer bits, a lower signal-to-noise ratio);
# they have no finite level at which they leave the inputs (weights) as they are
DESCENDING = ("quant_noise", "audio_noise")
# agreement with the clean outputs, by task: the first key a row carries, and what it means
AGREEMENT = (
    ("top1_agree", "same top-1 as clean"),
    ("agree_map_50", "mAP@.5 against the clean detections"),
    ("pixel_agree", "pixels of the clean class"),
    ("embedding_drift", "cosine to the clean embeddings (1 - drift)"),
    ("transcript_change", "1 - WER against the clean transcripts"),
)


def agreement_of(row: dict) -> tuple[float | None, str | None]:
    """A row's agreement with the clean outputs (1 = identical) and what it is, or (None, None)
    where none was measured."""
    for key, what in AGREEMENT:
        v = row.get(key)
        if isinstance(v, (int, float)) and not math.isnan(v):
            return (1.0 - v if key in ("embedding_drift", "transcript_change") else float(v)), what
    return None, None


def kl_of(row: dict) -> float | None:
    v = row.get("kl")
    return float(v) if isinstance(v, (int, float)) and not math.isnan(v) else None


def series(rows: list[dict], quality: str) -> dict[str, tuple[list[dict], float | None]]:
    """Each family's rows from the mildest level to the strongest, with the level at which the
    family leaves its inputs as they are (0 for a radius, rate or std; 1 for a playback speed;
    None where there is none: bits, signal-to-noise ratios). Speed goes two ways from 1: slower and
    faster clips are two series."""
    out: dict[str, tuple[list[dict], float | None]] = {}
    for family in dict.fromkeys(r["family"] for r in rows):
        fam = [r for r in rows if r["family"] == family and _number(r.get(quality)) is not None]
        if not fam:
            continue
        if family in DESCENDING:
            out[family] = (sorted(fam, key=lambda r: -r["level"]), None)
        elif family == "speed":
            slower = sorted((r for r in fam if r["level"] < 1.0), key=lambda r: -r["level"])
            faster = sorted((r for r in fam if r["level"] > 1.0), key=lambda r: r["level"])
            for name, part in (("speed (slower)", slower), ("speed (faster)", faster)):
                if part:
                    out[name] = (part, 1.0)
        else:
            out[family] = (sorted(fam, key=lambda r: r["level"]), 0.0)
    return out


def half_target(quality: str, clean: float) -> float:
    """The value of ``quality`` at which quality has halved from ``clean``."""
    if quality == "perplexity":
        return 2.0 * clean
    if quality in LOWER_IS_BETTER:  # an error rate: half the clean share of words right
        return (1.0 + clean) / 2.0
    return clean / 2.0


def _halved(quality: str, value: float, target: float) -> bool:
    return value >= target if quality in LOWER_IS_BETTER else value <= target


def quality_se(row: dict, quality: str) -> float | None:
    """The standard error of a row's (or the clean pass's) quality: its ``<quality>_se``, for a
    perplexity exp(loss) x ``loss_se`` (the delta method); None where none was measured."""
    se = _number(row.get(f"{quality}_se"))
    if se is None and quality == "perplexity":
        loss_se, ppl = _number(row.get("loss_se")), _number(row.get("perplexity"))
        se = ppl * loss_se if loss_se is not None and ppl is not None else None
    return se


def half_quality(
    points: list[tuple[float, float, float | None]],
    clean: float,
    clean_se: float | None,
    quality: str,
    anchor: float | None,
) -> dict:
    """Where quality halves along ``points`` ((level, value, standard error) from the mildest to the
    strongest level): linear interpolation between the last level short of half and the first at or
    past it, the clean value standing at ``anchor`` (the level that changes nothing; None: no such
    level). Its standard error propagates the bracketing levels' (and the clean value's, which sets
    the target) by the delta method, treated as independent; None where a bracketing level has none.

    Returns ``{"level", "se"}``, ``{"reached_by": mildest level}`` (halved already there, with no
    anchor to interpolate from) or ``{"not_reached": strongest level}``."""
    if not points:
        return {}
    target = half_target(quality, clean)
    pts = ([(anchor, clean, clean_se)] if anchor is not None else []) + list(points)
    first = next((i for i, (_, v, _) in enumerate(pts) if _halved(quality, v, target)), None)
    if first is None:
        return {"not_reached": points[-1][0]}
    if first == 0:
        return {"reached_by": pts[0][0]} if anchor is None else {}  # a clean value of 0: nothing to halve
    (x0, q0, s0), (x1, q1, s1) = pts[first - 1], pts[first]
    clean_is_q0 = anchor is not None and first == 1

    def level(c: float, a: float, b: float) -> float:
        t = half_target(quality, c)
        return x0 + (a - t) / (a - b) * (x1 - x0)

    x = level(clean, q0, q1)
    if s1 is None or (not clean_is_q0 and s0 is None):
        return {"level": x, "se": None}
    var = 0.0
    for i, sd in ((0, clean_se), (1, None if clean_is_q0 else s0), (2, s1)):
        if not sd:
            continue
        args = [clean, q0, q1]
        h = 1e-6 * max(1.0, abs(args[i]))
        hi, lo = list(args), list(args)
        hi[i] += h
        lo[i] -= h
        if clean_is_q0 and i == 0:  # the clean value is both the target's base and the first point
            hi[1], lo[1] = hi[0], lo[0]
        grad = (level(*hi) - level(*lo)) / (2 * h)
        var += (grad * sd) ** 2
    return {"level": x, "se": math.sqrt(var)}


def bounds_check(row: dict, base: float, quality: str, cfg) -> dict[str, str]:
    """The bounds a row breaks, each with the words that say so: ``quality`` (moved more than
    ``degradation_tolerance`` from ``base``; WER: that much, absolute), ``agreement`` (below
    ``agreement_floor``) and ``kl`` (above ``kl_ceiling``, where KL was measured)."""
    out = {}
    v, tol = row[quality], cfg.degradation_tolerance
    if quality == "wer":
        worse = v > base + tol
    elif quality in LOWER_IS_BETTER:
        worse = v > (1 + tol) * base
    else:
        worse = v < base - tol * abs(base)
    if worse:
        out["quality"] = f"{quality} {v:.3g} vs clean {base:.3g} (more than {tolerance_text(quality, tol)} off)"
    agree, _ = agreement_of(row)
    if agree is not None and agree < cfg.agreement_floor:
        out["agreement"] = f"agreement with the clean outputs {agree:.3g} below the floor {cfg.agreement_floor:g}"
    kl = kl_of(row)
    if kl is not None and kl > cfg.kl_ceiling:
        out["kl"] = f"KL {kl:.3g} above the ceiling {cfg.kl_ceiling:g}"
    return out


def tolerance_text(quality: str, tol: float) -> str:
    return f"{tol:g}" if quality == "wer" else f"{tol:.0%}"


def base_of(fam: list[dict], clean: dict, quality: str) -> float:
    """The clean value a family is compared with: PGD's is that of its own windows (samples)."""
    return fam[0].get(f"clean_{quality}", clean[quality])


def verdict(fam: list[dict], base: float, quality: str, cfg) -> tuple[dict | None, dict[str, str]]:
    """The first row (mildest first) that breaks a bound, and the bounds it breaks; (None, {})
    where every level stays within all of them."""
    for r in fam:
        broken = bounds_check(r, base, quality, cfg)
        if broken:
            return r, broken
    return None, {}


def level_text(family: str, level: float) -> str:
    return f"{level:.3g}bit" if family == "quant_noise" else f"{level:.3g}"


def summary_rows(result, cfg) -> list[dict]:
    """The summary table: the clean pass, then one row per family (and speed direction): where
    quality halves (``level ± se``, or not reached up to the strongest level), the strongest level
    with its quality, agreement and KL (where measured), and the first level out of bounds with
    the bound that decided."""
    d = result.data
    q, clean = d["quality"], d["clean"]
    rows = result.tables.get("robustness") or []
    fams = series(rows, q)
    has_kl = any(kl_of(r) is not None for r in rows)
    out = [
        {
            "family": "clean (no perturbation)",
            "quality halves at": "",
            "strongest level": "",
            q: clean[q],
            "agreement": 1.0,
            **({"KL": 0.0} if has_kl else {}),
            "first level out of bounds": "",
        }
    ]
    for name, (fam, anchor) in fams.items():
        family = fam[0]["family"]
        base = base_of(fam, clean, q)
        clean_se = _clean_se(fam[0], clean, q)
        points = [(r["level"], float(r[q]), quality_se(r, q)) for r in fam]
        half = half_quality(points, base, clean_se, q, anchor)
        strongest = fam[-1]
        agree, _ = agreement_of(strongest)
        first, broken = verdict(fam, base, q, cfg)
        row = {
            "family": name,
            "quality halves at": half_text(family, half),
            "strongest level": level_name_of(family, strongest["level"]),
            q: strongest[q],
            "agreement": "" if agree is None else agree,
            **({"KL": "" if kl_of(strongest) is None else kl_of(strongest)} if has_kl else {}),
            "first level out of bounds": (
                f"none up to {level_name_of(family, strongest['level'])}"
                if first is None
                else f"{level_name_of(family, first['level'])} ({', '.join(broken)})"
            ),
        }
        out.append(row)
    return out


def half_text(family: str, half: dict) -> str:
    if "level" in half:
        se = half["se"]
        return level_text(family, half["level"]) + (f" ± {se:.2g}" if se is not None else " (no standard error)")
    if "not_reached" in half:
        return f"not reached up to {level_name_of(family, half['not_reached'])}"
    if "reached_by" in half:
        return f"already at {level_name_of(family, half['reached_by'])} (the mildest level)"
    return "n/a"


def level_name_of(family: str, level: float) -> str:
    return f"{int(level)}bit" if family == "quant_noise" else f"{level:g}"


def _clean_se(first: dict, clean: dict, quality: str) -> float | None:
    """The clean value's standard error where measured: the clean pass's own, else for a classifier
    the binomial one of its accuracy on the samples (PGD's: on its own samples)."""
    if f"clean_{quality}" in first:  # PGD: the clean value of its own windows, no error kept
        return None
    se = quality_se(clean, quality)
    n = _number(clean.get("samples"))
    if se is None and quality == "accuracy" and n:
        p = clean[quality]
        se = math.sqrt(max(p * (1 - p), 0.0) / n)
    return se


def _number(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v) else None
