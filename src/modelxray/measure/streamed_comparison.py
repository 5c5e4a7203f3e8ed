"""Many variants of a model streamed block by block (``runtime.offload=blocks``), each scored against
the float path in the same read of the weights: the float path's logits fill the reference (argmax,
log-probabilities on the KL windows, per-window losses) batch by batch, and every other variant's
logits are compared with it as they come. In memory the same figures come from ``Reference`` and
``Reference.compare``; streamed, the model is never whole, so the reference is collected on the way."""

from __future__ import annotations

from dataclasses import dataclass

from modelxray.measure.reference import Comparison, Reference
from modelxray.metrics.lm import LMScore
from modelxray.metrics.windows import Window, batched


@dataclass
class StreamedScores:
    """The float path's reference and own score, and one comparison per variant after it."""

    reference: Reference
    float_score: LMScore
    comparisons: list[Comparison]  # variant 1, 2, ... in the order given


def score_variants(
    stream,
    windows: list[Window],
    batch_size: int,
    kl_windows: int,
    transforms: list,
    *,
    limits: list[int | None] | None = None,
    ks: list[int] | None = None,
    full: bool = False,
    progress: bool = False,
    desc: str = "streaming blocks",
) -> StreamedScores:
    """Stream ``windows`` (in batches of ``batch_size``) once through the float model and each of
    ``transforms`` (a block-by-block transform each: a quantizer's path, a noise); ``limits``: per
    transform, how many of the first batches it is scored on (None: all; a probe's few). ``ks``: the
    top-k accuracies every score keeps (top-1 always). ``full``: the float path (the reference) runs
    every window, however few the variants score."""
    ks = sorted({1, *(ks or [])})
    limits = list(limits) if limits is not None else [None] * len(transforms)
    batches = list(batched(windows, batch_size))
    wanted = max((len(batches) if n is None else min(n, len(batches)) for n in limits), default=len(batches))
    if not full:
        batches = batches[:wanted]  # what no variant scores is never streamed
    reference = Reference.collecting(batches, batch_size)
    float_score = LMScore(ks=ks)
    comparisons = [reference.comparison(ks) for _ in transforms]
    inputs = [x for x, _ in batches]
    for variant, b, logits in stream.logits(inputs, [None, *transforms], progress, desc, [None, *limits]):
        targets = batches[b][1]
        if variant == 0:
            float_score.update(logits, targets)
            reference.add(b, logits, targets, kl_windows)
            if b == len(batches) - 1:
                reference.finish()
        else:
            comparisons[variant - 1].add(b, logits, targets)
    return StreamedScores(reference, float_score, comparisons)
