"""Perplexity and agreement of a model streamed block by block (``runtime.offload=blocks``): the
float path and, after ``quant=``, the quantized path go through each block as it is read, so the
unquantized reference costs no second read of the model. Speed and per-module time are not measured:
a streamed forward's time is the disk's, not the model's."""

from __future__ import annotations

import time

from modelxray.core.formatting import human_bytes
from modelxray.measure.streamed_comparison import score_variants

NOT_TIMED = (
    "not measured: the model streamed from disk one block at a time (runtime.offload=blocks), so a forward's "
    "time is the disk's reads, not the model's compute"
)


def stream_scores(cfg, subject, windows, progress: bool, ks: list[int] | None = None, kl_windows: int | None = None):
    """``(score, seconds, comparison, reference)`` of the streamed model on ``windows`` (token windows
    of a causal LM, masked windows of a masked LM): the float model's score alone, or with ``quant=``
    the quantized model's, compared with the float one. ``ks``: the top-k accuracies kept;
    ``kl_windows``: the windows KL is taken on (``cfg.kl_windows`` by default)."""
    stream = subject.stream
    transforms = [] if stream.transform is None else [stream.transform]
    start = time.perf_counter()
    scores = score_variants(
        stream,
        windows,
        cfg.batch_size,
        cfg.kl_windows if kl_windows is None else kl_windows,
        transforms,
        ks=sorted(set(cfg.top_k if ks is None else ks)),
        progress=progress,
        desc="performance: streaming blocks",
    )
    seconds = time.perf_counter() - start
    if not transforms:
        return scores.float_score, seconds, None, None
    comparison = scores.comparisons[0]
    return comparison.score, seconds, comparison, scores.reference


def streaming_data(subject) -> dict:
    """What the report says of the stream: why, how many reads, what was held and spilled."""
    stream = subject.stream
    model_bytes = stream.model_bytes()
    stats = stream.stats
    spilled = f", {human_bytes(stats.spilled_bytes)} of them on disk" if stats.spilled_bytes else ""
    summary = (
        f"Streamed {len(stream.block_prefixes)} blocks of up to {human_bytes(stream.block_bytes())} from disk "
        f"({stream.reason}): {human_bytes(stats.bytes_read)} read, {stats.weight_reads(model_bytes):.2f} times the "
        f"{human_bytes(model_bytes)} of weights; hidden states held between blocks: {human_bytes(stats.hidden_bytes)}"
        f"{spilled}."
    )
    return {
        "summary": summary,
        "reason": stream.reason,
        "blocks": len(stream.block_prefixes),
        "block_bytes": stream.block_bytes(),
        "model_bytes": model_bytes,
        "weight_reads": stream.stats.weight_reads(model_bytes),
        "hidden_state_bytes": stream.stats.hidden_bytes,
        "hidden_state_spilled_bytes": stream.stats.spilled_bytes,
        "speed": NOT_TIMED,
    }
