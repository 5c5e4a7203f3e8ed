"""Benchmark on a CUDA GPU: the perplexity loop against a bare loop and lm-evaluation-harness, the
quant_impact memory table, and the time GPTQ takes. Needs a GPU; on a machine without one it says
so and exits 2.

    python scripts/bench_gpu.py                                   # embedded SmolLM2-135M, bf16
    python scripts/bench_gpu.py --model hf --name-or-path HuggingFaceTB/SmolLM2-1.7B --tokens 65536

Prints Markdown tables (``--markdown FILE`` also writes them) of: eval tokens/s of our loop (length-
sorted batches, SDPA, the configured dtype) and of a bare ``model(input_ids)`` loop over the same
windows, rounds alternating, with the ratio (target >= 0.97); lm-evaluation-harness's
``loglikelihood_rolling`` on the same text, its perplexity beside ours (target: ours >= 1.5x its
tokens/s at the same value; needs ``pip install lm-eval``); quant_impact's strategies with their
CUDA peak allocated/reserved memory, fragmentation and tokens/s; and GPTQ's quantization seconds.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", help="a config of conf/model")
    ap.add_argument("--name-or-path", help="model=hf: the hub id or directory")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--markdown", help="also write the tables to this Markdown file")
    ap.add_argument("--no-quant", action="store_true", help="only the evaluation loops (no quant_impact, no GPTQ)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_gpu: no CUDA GPU here; run it on a GPU machine", file=sys.stderr)
        sys.exit(2)

    from modelxray import api
    from modelxray.core.instantiate import build_component
    from modelxray.measure.scoring import score_windows
    from modelxray.metrics.windows import batched, make_windows

    model_keys = [f"model={args.model}", f"model.dtype={args.dtype}", "model.device=cuda"]
    if args.name_or_path:
        model_keys.append(f"model.name_or_path={args.name_or_path}")
    data_keys = [f"dataset.max_tokens={args.tokens}", f"dataset.seq_len={args.seq_len}"]
    cfg = api.compose([*model_keys, *data_keys])
    loaded = build_component(cfg.model, "model").load()
    data = build_component(cfg.dataset, "dataset").load(loaded.tokenizer)
    model = loaded.model
    windows = make_windows(data.ids, data.seq_len, "disjoint")
    batches = [inputs.cuda() for inputs, _ in batched(windows, args.batch_size)]
    n = sum(w.inputs.numel() for w in windows)
    gpu = torch.cuda.get_device_name()
    lines: list[str] = []

    def emit(block: list[str]) -> None:
        """Print a table as soon as it is measured (a later step that fails keeps the earlier ones)."""
        lines.extend(block)
        print("\n".join(block), flush=True)
        if args.markdown:
            Path(args.markdown).write_text("\n".join(lines) + "\n")

    emit([f"# GPU benchmark: {gpu}, {loaded.info.name}, {args.dtype}, {n:,} tokens in windows of {data.seq_len}", ""])

    def bare() -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.inference_mode():
            for inputs in batches:
                model(input_ids=inputs, use_cache=False)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    bare()
    ours_t, bare_t, ppl = [], [], math.nan
    for r in range(args.rounds):
        for name in ("ours", "bare") if r % 2 == 0 else ("bare", "ours"):
            if name == "bare":
                bare_t.append(bare())
            else:
                torch.cuda.synchronize()
                score, secs = score_windows(model, windows, args.batch_size, [1], progress=False)
                ours_t.append(secs)
                ppl = score.result()["perplexity"]
    ours, theirs = n / statistics.median(ours_t), n / statistics.median(bare_t)
    emit(
        [
            "| loop | tokens/s | perplexity |",
            "|---|---|---|",
            f"| bare model(input_ids) | {theirs:,.0f} | |",
            f"| modelxray | {ours:,.0f} | {ppl:.4f} |",
            f"| ratio modelxray / bare | {ours / theirs:.3f} | |",
            "",
        ]
    )
    emit(_lm_eval(model, loaded.tokenizer, data, args.batch_size, ours, ppl))
    if args.no_quant:
        return
    loaded.model = model = None  # the strategies load their own copy: free this one's GPU memory first
    batches.clear()
    torch.cuda.empty_cache()

    out = api.analyze(
        [*model_keys, *data_keys, "analyzer=quant_impact", "tracker=none"], output_dir="outputs/bench_gpu/quant_impact"
    )
    rows = out.results["quant_impact"].tables.get("strategies", [])
    table = [
        "| strategy | perplexity | tokens/s (speed) | weights MiB | CUDA peak allocated MiB | reserved MiB | fragmentation MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        table.append(
            f"| {r['strategy']} | {r['perplexity']:.3f} | {r['tokens_per_s']:,.0f} ({r['speed_measured']}) | "
            f"{r['weight_bytes'] / 2**20:,.1f} | "
            f"{r.get('cuda_peak_allocated', 0) / 2**20:,.0f} | {r.get('cuda_peak_reserved', 0) / 2**20:,.0f} | "
            f"{r.get('cuda_fragmentation_bytes', 0) / 2**20:,.0f} |"
        )
    emit(table)
    gptq = api.analyze(
        [*model_keys, *data_keys, "quant=gptq_int4", "analyzer=performance", "tracker=none"],
        output_dir="outputs/bench_gpu/gptq",
    )
    emit(["", f"GPTQ int4: {gptq.metrics['quant/seconds']:.1f} s to quantize on {gpu}."])


def _lm_eval(model, tokenizer, data, batch_size: int, ours: float, ppl: float) -> list[str]:
    """lm-evaluation-harness's loglikelihood_rolling on the same text: tokens/s and perplexity."""
    try:
        from lm_eval.api.instance import Instance
        from lm_eval.models.huggingface import HFLM
    except ImportError:
        return ["lm-evaluation-harness is not installed (pip install lm-eval): no comparison with it.", ""]
    text = tokenizer.decode(data.ids.tolist())
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, max_length=data.seq_len)
    request = Instance(request_type="loglikelihood_rolling", doc={}, arguments=(text,), idx=0)
    n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    torch.cuda.synchronize()
    start = time.perf_counter()
    loglik = lm.loglikelihood_rolling([request], disable_tqdm=True)[0]
    torch.cuda.synchronize()
    theirs = n / (time.perf_counter() - start)
    return [
        "| evaluator | tokens/s | perplexity |",
        "|---|---|---|",
        f"| lm-evaluation-harness | {theirs:,.0f} | {math.exp(-loglik / n):.4f} |",
        f"| modelxray | {ours:,.0f} | {ppl:.4f} |",
        f"| ratio modelxray / lm-eval | {ours / theirs:.2f} (target >= 1.5) | |",
        "",
    ]


if __name__ == "__main__":
    main()
