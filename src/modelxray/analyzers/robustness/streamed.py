"""robustness on a model streamed block by block (``runtime.offload=blocks``): weight noise and
quantization noise, every level and seed one path of a single stream beside the clean float model,
each tensor noised as its block is read with the noise an in-memory run draws for it, so the rows
are the in-memory rows, read from disk once. Input attacks need a backward pass through the whole
model and the input perturbations their own windows: a streamed run refuses them before any weight
is read (``config.RobustnessAnalyzer.stream_refusal``)."""

from __future__ import annotations

from types import SimpleNamespace

from modelxray.analyzers.robustness.rows import CLEAN_KEYS, draw_key, draws, grid, mean_row, record_rows
from modelxray.core.result import Result, RunContext
from modelxray.kinds.causal_lm import CausalLM
from modelxray.kinds.table import kind_of
from modelxray.measure.streamed_comparison import score_variants
from modelxray.metrics.windows import lm_eval_windows
from modelxray.perturb.weight_noise import StreamedNoise, add_gaussian_noise_, add_quant_step_noise_, noise_targets


def _windows(cfg, subject, kind):
    if isinstance(kind, CausalLM):
        return lm_eval_windows(subject.data, subject.batches, cfg.eval_windows)
    return subject.data.windows[: cfg.eval_windows]  # a masked LM's masked windows


def run_streamed(cfg, subject, ctx: RunContext) -> Result:
    stream, kind = subject.stream, kind_of(subject)
    targets = noise_targets(stream.model, cfg.noise_targets)
    gen = draws(ctx)
    paths: list[tuple[str, float, StreamedNoise]] = []
    for level in cfg.weight_noise_levels:
        for seed in range(cfg.seeds):
            g = gen(draw_key("weight_noise", level, seed))
            add = lambda ts, lv=level, g=g: add_gaussian_noise_(ts, lv, g)  # noqa: E731
            paths.append(("weight_noise", level, StreamedNoise(stream.model, targets, add)))
    for bits in cfg.quant_noise_bits:
        for seed in range(cfg.seeds):
            g = gen(draw_key("quant_noise", bits, seed))
            add = lambda ts, b=bits, g=g: add_quant_step_noise_(ts, b, g, cfg.quant_noise_granularity)  # noqa: E731
            paths.append(("quant_noise", bits, StreamedNoise(stream.model, targets, add)))
    windows = _windows(cfg, subject, kind)
    mark = stream.stats.mark()
    scores = score_variants(
        stream,
        windows,
        cfg.batch_size,
        cfg.kl_windows,
        [p for _, _, p in paths],
        progress=ctx.progress,
        desc="robustness: streaming blocks",
    )
    clean = scores.reference.metrics
    harness = SimpleNamespace(quality="perplexity", size=len(windows), clean=clean)
    runs: dict[tuple[str, float], list[dict]] = {}
    for (family, level, _), comparison in zip(paths, scores.comparisons, strict=True):
        runs.setdefault((family, level), []).append(comparison.result())
    rows = [mean_row(cfg, kind, family, level, r, clean, harness) for (family, level), r in runs.items()]

    result = cfg.new_result()
    result.data.update(
        {"task": kind.task, "kind": kind.name, "quality": "perplexity", "clean": clean, "config": grid(cfg)}
    )
    result.data["attack_space"] = "token embeddings"
    result.data["eps_grid"] = []
    result.data["noise_targets"] = {
        "set": cfg.noise_targets,
        "tensors": len(targets),
        "parameters": sum(t.param.numel() for t in targets),
    }
    model_bytes = stream.model_bytes()
    result.data["streaming"] = {
        "paths": len(paths),
        **stream.stats.since(mark, model_bytes),
    }
    result.metrics.update({f"clean_{k}": clean[k] for k in CLEAN_KEYS if k in clean})
    record_rows(result, rows, "perplexity")
    return result
