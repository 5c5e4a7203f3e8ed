"""Benchmark: our perplexity loop vs a bare ``model(input_ids)`` loop on the same batches, and
model-load time with and without the caches.

    python scripts/bench_eval.py                      # embedded default, 8,192 tokens
    python scripts/bench_eval.py --model tiny_gpt2 --tokens 4096

Prints tokens/s of both loops and their ratio (target >= 0.97: scoring must add almost nothing to
the forward pass), with ``--lm-eval`` the same comparison against lm-evaluation-harness's
``loglikelihood_rolling`` (when ``lm_eval`` is installed), and load times: GGUF conversion (no disk cache), from the disk cache, and a
per-process cache hit. Rounds alternate the two loops so drifting machine load hits both equally.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from modelxray.api import compose
from modelxray.core.instantiate import build_component
from modelxray.measure.scoring import score_windows
from modelxray.metrics.windows import batched, make_windows
from modelxray.models import process_cache


def bare_loop(model, batches) -> float:
    start = time.perf_counter()
    with torch.inference_mode():
        for inputs, _ in batches:
            model(inputs)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", help="a config of conf/model (default: smollm2)")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-cold-load", action="store_true", help="skip the slow load without the disk cache")
    ap.add_argument("--lm-eval", action="store_true", help="also time lm-evaluation-harness (pip install lm-eval)")
    args = ap.parse_args()

    cfg = compose([f"model={args.model}", f"dataset.max_tokens={args.tokens}", f"dataset.seq_len={args.seq_len}"])
    source = build_component(cfg.model, "model")
    dataset = build_component(cfg.dataset, "dataset")

    print(f"== model load: {args.model}")
    if hasattr(source, "use_disk_cache") and not args.skip_cold_load:
        cold = type(source)(**{**source.__dict__, "use_disk_cache": False})
        t = time.perf_counter()
        cold.load()
        print(f"  {'no disk cache (convert the source file):':<42}{time.perf_counter() - t:9.2f} s")
    process_cache.clear()
    t = time.perf_counter()
    loaded = process_cache.load_model(source)
    first = time.perf_counter() - t
    t = time.perf_counter()
    process_cache.load_model(source)
    hit = time.perf_counter() - t
    label = "from the disk cache" if hasattr(source, "use_disk_cache") else "built from config"
    print(f"  {label + ':':<42}{first:9.2f} s")
    print(f"  {'per-process cache hit:':<42}{hit * 1e3:9.3f} ms  ({first / max(hit, 1e-9):,.0f}x faster)")

    data = dataset.load(loaded.tokenizer)
    windows = make_windows(data.ids, data.seq_len, "disjoint")
    batches = list(batched(windows, args.batch_size))
    n_tokens = sum(w.inputs.numel() for w in windows)
    model = loaded.model
    print(
        f"== scoring {n_tokens:,} tokens in {len(batches)} batches of {args.batch_size} x {data.seq_len}, "
        f"{torch.get_num_threads()} threads"
    )
    bare_loop(model, batches[:1])  # warm-up
    ours_t, bare_t = [], []
    ppl = None
    for r in range(args.rounds):
        order = [("ours", None), ("bare", None)] if r % 2 == 0 else [("bare", None), ("ours", None)]
        for name, _ in order:
            if name == "ours":
                score, secs = score_windows(model, windows, args.batch_size, [1, 5, 10], progress=False)
                ppl = score.result()["perplexity"]
                ours_t.append(secs)
            else:
                bare_t.append(bare_loop(model, batches))
    ours, bare = statistics.median(ours_t), statistics.median(bare_t)
    print(f"  bare model(input_ids) loop: {n_tokens / bare:8.1f} tokens/s  (median of {args.rounds})")
    print(f"  modelxray scoring loop:     {n_tokens / ours:8.1f} tokens/s  (perplexity {ppl:.4f}, top-1/5/10)")
    print(f"  ratio ours / bare:          {bare / ours:8.3f}   (target >= 0.97)")
    if args.lm_eval:
        compare_lm_eval(model, loaded.tokenizer, data, args.batch_size)


def compare_lm_eval(model, tokenizer, data, batch_size: int) -> None:
    """lm-evaluation-harness's loglikelihood_rolling vs our lm_eval_rolling protocol on the same text."""
    import math

    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    text = tokenizer.decode(data.ids.tolist())
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, max_length=data.seq_len)
    request = Instance(request_type="loglikelihood_rolling", doc={}, arguments=(text,), idx=0)
    n_tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    start = time.perf_counter()
    loglik = lm.loglikelihood_rolling([request], disable_tqdm=True)[0]
    theirs = time.perf_counter() - start
    ids = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"])
    windows = make_windows(ids, data.seq_len, "lm_eval_rolling", prefix=lm.prefix_token_id)
    score, ours = score_windows(model, windows, batch_size, [1, 5, 10], progress=False)
    print(f"== lm-evaluation-harness loglikelihood_rolling, {n_tokens:,} tokens, windows of {data.seq_len}")
    print(f"  lm-eval:   {n_tokens / theirs:8.1f} tokens/s  perplexity {math.exp(-loglik / n_tokens):.4f}")
    print(f"  modelxray: {score.n_tokens / ours:8.1f} tokens/s  perplexity {score.result()['perplexity']:.4f}")
    print(f"  ratio ours / lm-eval: {theirs / ours * score.n_tokens / n_tokens:.3f}   (target >= 1.0)")


if __name__ == "__main__":
    main()
