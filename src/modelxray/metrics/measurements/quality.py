"""Quality of a model on its data: loss, perplexity or accuracy, with a Wilson interval for accuracy."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


def _safe_exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


# -- quality -----------------------------------------------------------------------------------
_TOPK = re.compile(r"^top(\d+)_accuracy$")
Z_95 = 1.959963984540054  # two-sided 95% quantile of the standard normal, scipy.stats.norm.ppf(0.975)


def wilson_interval(successes: float, n: float, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of the proportion ``successes / n`` (95% for the default ``z``).

    With p = successes/n: centre (p + z²/2n) / (1 + z²/n), half-width
    z·sqrt(p(1-p)/n + z²/4n²) / (1 + z²/n). Unlike the normal (Wald) interval it stays inside
    [0, 1] and has a width at p = 0 or 1 (Wilson 1927; Brown, Cai & DasGupta 2001)."""
    if not n > 0:
        raise ValueError("an interval of a proportion needs n > 0")
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(max(p * (1 - p), 0.0) / n + z2 / (4 * n * n)) / denom
    low = 0.0 if p <= 0 else max(0.0, centre - half)  # exact at the ends: rounding left 1e-17 below 0 hits
    high = 1.0 if p >= 1 else min(1.0, centre + half)
    return low, high


def clustered_wilson(share: float, se: float | None, n: float, z: float = Z_95) -> tuple[float, float]:
    """A Wilson interval for a share measured on ``n`` units that come in clusters (tokens in
    windows), whose standard error ``se`` was taken with the clusters as units: the Wilson interval
    at the effective count n_eff = p(1-p) / se^2 (Kish's design effect), at most ``n``. Unlike share -+
    z se it stays inside [0, 1] and keeps a width at 0 and 1 (where se is 0, n_eff is ``n``)."""
    var = share * (1 - share)
    n_eff = min(n, var / se**2) if se and se > 0 and var > 0 else n
    return wilson_interval(share * n_eff, n_eff, z)


def _pooled_se(ses: list[float | None], weights: Sequence[float], total: float) -> float | None:
    """Standard error of a weighted mean of independent estimates: sqrt(sum((w_i / W)^2 se_i^2))."""
    if any(se is None for se in ses):
        return None
    return math.sqrt(sum((w / total) ** 2 * se**2 for w, se in zip(weights, ses)))  # type: ignore[operator]


@dataclass(frozen=True)
class Quality:
    """Mean loss (nats per scored token or example) over ``n_scored`` scored items, top-k accuracy
    (``accuracy_at[1]`` is ``accuracy``) and bits per byte. ``count_key`` names the count in metrics
    and JSON (``tokens_scored``; ``examples_scored`` for a classifier; robustness rows of a classifier: ``samples``).

    ``per_example`` marks a classifier's (build it with ``Quality.of_classifier``).
    A language model's perplexity is ``exp(loss)``, always derived, so a pooled perplexity is that
    of the pooled mean loss, never a mean of perplexities. A classifier has no perplexity (none is
    logged or rendered); its accuracy carries a 95% Wilson score interval (``accuracy_ci95``,
    metrics ``accuracy_ci_low``/``accuracy_ci_high``), which treats the examples as independent
    trials: that holds for a test set of examples, not for the correlated tokens of a text."""

    loss: float
    n_scored: float | None = None
    accuracy_at: dict[int, float] = field(default_factory=dict)
    bits_per_byte: float | None = None
    count_key: str = field(default="tokens_scored", repr=False)
    per_example: bool = field(default=False, repr=False)  # a classifier's: one score per example, not per token
    # a language model's standard errors, windows as units (``metrics.lm.ratio_se``): tokens inside
    # a window are correlated, so the window is what is drawn independently
    loss_se: float | None = None
    accuracy_se: float | None = None
    windows: float | None = None  # windows scored
    # the loss's error with tokens as independent draws (llama.cpp's perplexity tool): smaller than
    # loss_se, because tokens of one window share their context; reported for comparison only
    loss_se_per_token: float | None = None
    name: str = field(default="perplexity", repr=False)  # what the perplexity is of, said in reports

    @classmethod
    def of_classifier(cls, loss: float, n_scored: float, accuracy_at: dict[int, float]) -> Quality:
        """A classifier's quality: mean cross-entropy over ``n_scored`` examples and top-k accuracy."""
        return cls(
            loss=loss,
            n_scored=n_scored,
            accuracy_at=dict(sorted(accuracy_at.items())),
            count_key="examples_scored",
            per_example=True,
        )

    @property
    def is_classifier(self) -> bool:
        return self.per_example

    @property
    def perplexity(self) -> float:
        """exp of the mean loss (inf when it overflows, NaN when the loss is). Defined for a
        language model; a classifier's quality never reports it."""
        return _safe_exp(self.loss)

    @property
    def perplexity_se(self) -> float | None:
        """Standard error of the perplexity by the delta method: perplexity x the loss's error."""
        return None if self.loss_se is None else self.perplexity * self.loss_se

    @property
    def perplexity_ci95(self) -> tuple[float, float] | None:
        """exp(loss -+ 1.96 x loss_se): the loss's normal interval carried through exp, so it is
        asymmetric around the perplexity, as it should be."""
        if self.loss_se is None or not math.isfinite(self.loss_se):
            return None
        return _safe_exp(self.loss - Z_95 * self.loss_se), _safe_exp(self.loss + Z_95 * self.loss_se)

    @property
    def accuracy(self) -> float | None:
        return self.accuracy_at.get(1)

    @property
    def accuracy_ci95(self) -> tuple[float, float] | None:
        """95% Wilson score interval of the top-1 accuracy: over a classifier's ``n_scored``
        examples; over a language model's tokens at the effective count its window-clustered
        standard error implies (``clustered_wilson``). None when the accuracy, the count or (a
        language model's) standard error is missing."""
        acc, n = self.accuracy, self.n_scored
        if acc is None or not n or not math.isfinite(acc):
            return None
        if self.is_classifier:
            return wilson_interval(acc * n, n)
        if self.accuracy_se is None or not math.isfinite(self.accuracy_se):  # tokens are not independent:
            return None  # without the windows' error (one window gives none), no interval
        return clustered_wilson(acc, self.accuracy_se, n)

    @classmethod
    def aggregate(cls, qualities: Sequence[Quality], weights: Sequence[float] | None = None) -> Quality:
        """Pool by ``weights`` (default: the items each scored): the loss and accuracies are weighted
        means, bits per byte is total nats over total bytes, and the perplexity follows from the loss
        (a classifier's accuracy interval from the pooled accuracy and count)."""
        if not qualities:
            raise ValueError("no quality measurements to aggregate")
        if len({q.per_example for q in qualities}) > 1:
            raise ValueError("cannot pool the quality of a language model with that of a classifier")
        if weights is None:
            if any(q.n_scored is None for q in qualities):
                raise ValueError("pooling by items scored needs every n_scored; pass weights")
            weights = [float(q.n_scored) for q in qualities]  # type: ignore[arg-type]
        if len(weights) != len(qualities):
            raise ValueError("one weight per measurement")
        total = float(sum(weights))
        if not total > 0:
            raise ValueError("the weights sum to zero: nothing was scored")
        mean = lambda xs: sum(w * x for w, x in zip(weights, xs)) / total  # noqa: E731
        ks = set.intersection(*(set(q.accuracy_at) for q in qualities))
        bpb = None
        if all(q.bits_per_byte is not None and q.bits_per_byte > 0 for q in qualities):
            nats = [w * q.loss for w, q in zip(weights, qualities)]  # proportional to each one's nats
            nbytes = [n / q.bits_per_byte for n, q in zip(nats, qualities)]  # and to its bytes (x ln 2)
            bpb = sum(nats) / sum(nbytes)
        counts = [q.n_scored for q in qualities]
        return cls(
            loss=mean([q.loss for q in qualities]),
            n_scored=None if any(c is None for c in counts) else float(sum(counts)),  # type: ignore[arg-type]
            accuracy_at={k: mean([q.accuracy_at[k] for q in qualities]) for k in sorted(ks)},
            bits_per_byte=bpb,
            count_key=qualities[0].count_key,
            per_example=qualities[0].per_example,
            loss_se=_pooled_se([q.loss_se for q in qualities], weights, total),
            accuracy_se=_pooled_se([q.accuracy_se for q in qualities], weights, total),
            windows=None if any(q.windows is None for q in qualities) else sum(q.windows for q in qualities),
        )

    def to_metrics(self, prefix: str = "") -> dict[str, float]:
        """A language model: ``loss``, ``perplexity``, ``tokens_scored``, ``accuracy``,
        ``top<k>_accuracy``, ``bits_per_byte``. A classifier: ``loss``, ``examples_scored``,
        ``accuracy``, ``accuracy_ci_low``, ``accuracy_ci_high``, ``top<k>_accuracy`` (no perplexity)."""
        out = {f"{prefix}loss": self.loss}
        if not self.is_classifier:
            out[f"{prefix}perplexity"] = self.perplexity
        if self.n_scored is not None:
            out[f"{prefix}{self.count_key}"] = float(self.n_scored)
        ci = self.accuracy_ci95
        for k in sorted(self.accuracy_at):
            out[f"{prefix}accuracy" if k == 1 else f"{prefix}top{k}_accuracy"] = self.accuracy_at[k]
            if k == 1 and ci is not None:
                out[f"{prefix}accuracy_ci_low"], out[f"{prefix}accuracy_ci_high"] = ci
        if self.bits_per_byte is not None:
            out[f"{prefix}bits_per_byte"] = self.bits_per_byte
        if self.loss_se is not None:
            out[f"{prefix}loss_se"] = self.loss_se
            if not self.is_classifier:
                out[f"{prefix}perplexity_se"] = self.perplexity_se
                ci = self.perplexity_ci95
                if ci is not None:
                    out[f"{prefix}perplexity_ci_low"], out[f"{prefix}perplexity_ci_high"] = ci
        if self.accuracy_se is not None:
            out[f"{prefix}accuracy_se"] = self.accuracy_se
        if self.loss_se_per_token is not None and not self.is_classifier:
            out[f"{prefix}loss_se_per_token"] = self.loss_se_per_token
            out[f"{prefix}perplexity_se_per_token"] = self.perplexity * self.loss_se_per_token
        if self.windows is not None:
            out[f"{prefix}windows_scored"] = float(self.windows)
        return out

    def to_dict(self) -> dict[str, Any]:
        return self.to_metrics()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Quality:
        """From ``to_dict()`` or any record with these keys (others are ignored; ``perplexity`` and
        the accuracy interval are recomputed). An ``examples_scored`` count marks a classifier."""
        count_key = next(
            (k for k in ("tokens_scored", "examples_scored", "samples") if d.get(k) is not None), "tokens_scored"
        )
        acc = {1: float(d["accuracy"])} if d.get("accuracy") is not None else {}
        for key, v in d.items():
            m = _TOPK.match(key)
            if m and v is not None:
                acc[int(m.group(1))] = float(v)
        bpb = d.get("bits_per_byte")
        opt = lambda key: None if d.get(key) is None else float(d[key])  # noqa: E731
        return cls(
            loss=float(d["loss"]),
            n_scored=None if d.get(count_key) is None else float(d[count_key]),
            accuracy_at=dict(sorted(acc.items())),
            bits_per_byte=None if bpb is None else float(bpb),
            count_key=count_key,
            per_example=count_key == "examples_scored",
            loss_se=opt("loss_se"),
            accuracy_se=opt("accuracy_se"),
            windows=opt("windows_scored"),
            loss_se_per_token=opt("loss_se_per_token"),
        )

    def _parts(self) -> tuple[str, list[str]]:
        if self.is_classifier:
            acc = self.accuracy
            head = f"accuracy {acc:.3f}" if acc is not None else f"loss {self.loss:.4f} nats"
            rest = []
            ci = self.accuracy_ci95
            if ci is not None:
                rest.append(f"95% CI [{ci[0]:.3f}, {ci[1]:.3f}]")
            if acc is not None:
                rest.append(f"loss {self.loss:.4f} nats")
            rest += [f"top-{k} accuracy {v:.3f}" for k, v in sorted(self.accuracy_at.items()) if k != 1]
            return head, rest
        head = f"{self.name} {self.perplexity:.4g}"
        ci = self.perplexity_ci95
        if ci is not None:
            head += f" ± {self.perplexity_se:.2g}"
        rest = [f"95% CI [{ci[0]:.4g}, {ci[1]:.4g}]"] if ci is not None else []
        rest.append(f"loss {self.loss:.4f} nats" + (f" ± {self.loss_se:.2g}" if ci is not None else ""))
        rest += [f"{'top-1' if k == 1 else f'top-{k}'} accuracy {v:.3f}" for k, v in sorted(self.accuracy_at.items())]
        if self.bits_per_byte is not None:
            rest.append(f"{self.bits_per_byte:.3f} bits/byte")
        return head, rest

    def _count(self) -> str:
        if self.n_scored is None:
            return ""
        what = {"tokens_scored": "tokens", "examples_scored": "examples"}.get(self.count_key, self.count_key)
        windows = f" in {int(self.windows):,} windows" if self.windows else ""
        return f", {int(self.n_scored):,} {what} scored{windows}"

    def __str__(self) -> str:
        head, rest = self._parts()
        return f"{head} ({', '.join(rest)}){self._count()}" if rest else f"{head}{self._count()}"

    def markdown(self) -> str:
        head, rest = self._parts()
        return f"**{head}** ({', '.join(rest)}){self._count()}" if rest else f"**{head}**{self._count()}"
