"""Signs that a model has learnt nothing: predictions that collapse onto one class, outputs that do
not depend on the input, accuracy no better than always answering the commonest class, a language
model no better than guessing uniformly. A report about such a model ("robust to everything",
"int2 loses nothing") misleads, so these come first. Pure functions of predictions and labels."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the analyzers' configs read COLLAPSE_SHARE without importing torch
    import torch

COLLAPSE_SHARE = 0.95  # default share of one predicted class that is a collapse (analyzer.performance.collapse_share)


def classifier_signs(logits: torch.Tensor, labels: torch.Tensor, collapse_share: float) -> list[str]:
    """What is degenerate about a classifier's ``logits`` (N, classes) on ``labels`` (N,): one class
    predicted for at least ``collapse_share`` of the examples; outputs the same for every input;
    accuracy whose 95% Wilson interval holds the commonest class's share (what always answering it
    scores). Empty for a model that learnt something."""
    import torch

    from modelxray.metrics.measurements import wilson_interval

    n = int(labels.shape[0])
    if n == 0:
        return []
    out = []
    predicted = logits.argmax(-1)
    counts = torch.bincount(predicted, minlength=logits.shape[-1])
    top = int(counts.argmax())
    share = float(counts[top]) / n
    if float((logits - logits.mean(0, keepdim=True)).abs().max()) < 1e-6 * (1 + float(logits.abs().max())):
        out.append(f"its outputs are the same for every input (class {top} always)")
    elif share >= collapse_share:
        out.append(f"it predicts class {top} for {share:.1%} of the {n:,} examples")
    correct = int((predicted == labels).sum())
    majority = float(torch.bincount(labels).max()) / n
    low, high = wilson_interval(correct, n)
    if low <= majority:
        out.append(
            f"its accuracy {correct / n:.3f} (95% interval {low:.3f}-{high:.3f}) is no better than always "
            f"answering the commonest class ({majority:.3f})"
        )
    return out


def language_model_signs(perplexity: float, vocab_size: int | None, share: float) -> list[str]:
    """A language model whose perplexity is at least ``share`` of its vocabulary's size predicts no
    better than a uniform guess over the tokens."""
    if vocab_size and perplexity == float("inf"):
        return [
            f"its perplexity is infinite: it gives the right tokens next to no probability ({vocab_size:,}-token vocabulary)"
        ]
    if vocab_size and perplexity >= share * vocab_size:
        return [
            f"its perplexity {perplexity:,.0f} is {perplexity / vocab_size:.0%} of its {vocab_size:,}-token "
            "vocabulary: no better than guessing uniformly"
        ]
    return []


def chance_signs(what: str, correct: int, n: int, commonest_share: float) -> list[str]:
    """Accuracy (``correct`` of ``n``) whose 95% Wilson interval holds ``commonest_share``, what always
    answering the commonest label scores: ``what`` names the accuracy ("accuracy", "k-NN accuracy")."""
    from modelxray.metrics.measurements import wilson_interval

    if n == 0:
        return []
    low, high = wilson_interval(correct, n)
    if low > commonest_share:
        return []
    return [
        f"its {what} {correct / n:.3f} (95% interval {low:.3f}-{high:.3f}) is no better than always answering "
        f"the commonest label ({commonest_share:.3f})"
    ]


def commonest_share(labels: torch.Tensor) -> float:
    """The share of the commonest of ``labels`` (integers; negative ones are not labels)."""
    import torch

    kept = labels[labels >= 0].reshape(-1)
    return float(torch.bincount(kept).max()) / int(kept.numel()) if kept.numel() else 0.0


def transcript_signs(wer: float) -> list[str]:
    """A recogniser whose word error rate is 1 or more gets (next to) no word of its transcripts right."""
    return (
        [f"its word error rate {wer:.3f} is 1 or more: next to no word of its transcripts is right"] if wer >= 1 else []
    )


def empty_output_signs(empty_share: float, n: int) -> list[str]:
    """A generative model whose greedy outputs are all empty says nothing at all, whatever its loss."""
    return [f"its greedy outputs are empty for all {n:,} generated examples"] if n and empty_share >= 1 else []


def floor_signs(what: str, value: float, floor: float) -> list[str]:
    """A score that stays at its floor (``value`` at most ``floor``): a detector's mAP of 0."""
    return [f"its {what} {value:.3f} is at its floor ({floor:g})"] if value <= floor else []


def sentence(signs: list[str], name: str) -> str:
    """The one warning that leads the insights."""
    return (
        f"Degenerate model: {'; '.join(signs)}. {name} has learnt little or nothing, so every figure below "
        "(robustness, quantization loss, agreement) describes a model that does not work: check its weights "
        "and that it was trained."
    )
