"""A run's headline: the few figures that say what happened (quality, its change against the
reference, size), each with its uncertainty. They are logged again as ``_headline/<name>`` metrics, so
MLflow's runs table shows the same columns for every kind of model, and written as the run's
description, so the run page answers "what happened" at a glance. Pure functions of the metrics."""

from __future__ import annotations

import math

from modelxray.core.formatting import human_bytes

# The headline metrics' prefix. MLflow's charts view makes a section of each prefix and opens on the
# first in sorted order (JavaScript's sort, then localeCompare): "_" sorts before every letter in both,
# so the headline comes first whatever other runs share the experiment (bitwidth/, classify/ ...).
SECTION = "_headline"

# what each headline figure is called in words
LABELS = {
    "perplexity": "perplexity",
    "accuracy": "accuracy",
    "ppl_ratio": "perplexity ratio",
    "top1_agree": "top-1 agreement",
    "kl": "KL",
    "delta_loss": "loss change",
    "output_cosine": "output cosine",
    "output_rel_error": "relative error",
    "chrf": "chrF",
    "wer": "WER",
    "exact_match": "exact match",
    "map": "mAP",
    "miou": "mean IoU",
    "knn_accuracy": "k-NN accuracy",
    "embedding_drift": "embedding drift",
    "pixel_agree": "pixel agreement",
    "size_bytes": "weights",
    "effective_bits": "effective bits",
}


def headline(metrics: dict[str, float], entries: list[str]) -> list[tuple[str, float, float | None]]:
    """Per entry (``a|b|c``), the first alternative the run logged (finite), as (name, value, standard
    error or None): the name is the key's last part (``performance/top1_agree`` -> ``top1_agree``), so
    a language model's headline is its perplexity and a classifier's its accuracy, never one column
    holding both."""
    out = []
    for entry in entries:
        for key in (k.strip() for k in entry.split("|")):
            value = metrics.get(key)
            if value is None or not math.isfinite(value):
                continue
            se = metrics.get(f"{key}_se")
            out.append(
                (key.rsplit("/", 1)[-1], float(value), float(se) if se is not None and math.isfinite(se) else None)
            )
            break
    return out


def headline_metrics(figures: list[tuple[str, float, float | None]]) -> dict[str, float]:
    """``_headline/<name>`` (and ``_headline/<name>_se``) for MLflow."""
    out = {}
    for name, value, se in figures:
        out[f"{SECTION}/{name}"] = value
        if se is not None:
            out[f"{SECTION}/{name}_se"] = se
    return out


def figure_text(name: str, value: float, se: float | None) -> str:
    label = LABELS.get(name, name.replace("_", " "))
    if name.endswith("bytes"):
        return f"{label} {human_bytes(value)}"
    shown = f"{value:.4g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"
    return f"{label} {shown}" + (f" ± {se:.2g}" if se is not None else "")


def description(title: str, figures: list[tuple[str, float, float | None]], links: list[tuple[str, str]]) -> str:
    """The run's description (Markdown): the title, the headline figures (± one standard error), links."""
    lines = [f"**{title}**", ""]
    if figures:
        errors = " (± one standard error)" if any(se is not None for _, _, se in figures) else ""
        lines += ["; ".join(figure_text(*f) for f in figures) + errors, ""]
    lines += [f"[{text}]({url})" for text, url in links]
    return "\n".join(lines).strip() + "\n"
