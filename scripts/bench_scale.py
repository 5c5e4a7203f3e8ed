"""Benchmark: memory and speed as the model grows. Random-weight Llama models with the shapes of
SmolLM2-135M, -360M and -1.7B are built from configs and saved as Hugging Face directories; each
is then run through the analyzers and quantizers as ``python run.py model=hf ...`` in its own
process, and scored by our evaluation loop and by a bare ``model(input_ids)`` loop in one process.

    python scripts/bench_scale.py                            # 135m and 360m, 256 tokens
    python scripts/bench_scale.py --sizes 135m,360m,1.7b --tokens 512 --markdown docs/scale.md

Prints, per size: the weight bytes; for each run its peak resident memory over the weight bytes
(targets: 1.15 for a single run with a quantizer, 1.3 for bitwidth, quant_impact and robustness)
and the growth: the peak above the same run's peak on a 2-layer model (the fixed cost of Python,
torch, transformers and the report), over the weight bytes above that model's; seconds per scored
token; and our loop's tokens/s over the bare loop's (target
>= 0.97), the two timed in alternating rounds in one process. The 2-layer model (``tiny``) always runs first:
``--sizes tiny`` alone checks the script itself in a minute.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SHAPES = {  # Hugging Face's SmolLM2 configs (vocabulary 49,152, tied embeddings)
    "tiny": dict(
        hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
    ),
    "135m": dict(
        hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3
    ),
    "360m": dict(
        hidden_size=960, intermediate_size=2560, num_hidden_layers=32, num_attention_heads=15, num_key_value_heads=5
    ),
    "1.7b": dict(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=24, num_attention_heads=32, num_key_value_heads=32
    ),
}

# each run: a name and its overrides (small settings: the memory shape, not the analysis, is measured)
RUNS = {
    "performance": [
        "analyzer=performance",
        "analyzer.performance.speed_batch_sizes=[1]",
        "analyzer.performance.iters=1",
    ],
    "performance int4": [
        "analyzer=performance",
        "quant=int4",
        "analyzer.performance.speed_batch_sizes=[1]",
        "analyzer.performance.iters=1",
    ],
    "performance gptq_int4": [
        "analyzer=performance",
        "quant=gptq_int4",
        "dataset.calibration_windows=2",
        "analyzer.performance.speed_batch_sizes=[1]",
        "analyzer.performance.iters=1",
    ],
    "bitwidth": [
        "analyzer=bitwidth",
        "analyzer.bitwidth.uniform_bits=[8,4]",
        "analyzer.bitwidth.mixed=false",
        "analyzer.bitwidth.progressive=false",
        "analyzer.bitwidth.sensitivity=false",
    ],
    "quant_impact": [
        "analyzer=quant_impact",
        "analyzer.quant_impact.strategies=[none,int8,int4]",
        "analyzer.quant_impact.iters=1",
    ],
    "robustness": [
        "analyzer=robustness",
        "analyzer.robustness.pgd_eps=[]",
        "analyzer.robustness.seeds=1",
        "analyzer.robustness.quant_noise_bits=[4]",
        "analyzer.robustness.dropout_rates=[]",
        "analyzer.robustness.substitution_rates=[]",
    ],
}


def build(size: str, work: Path) -> tuple[Path, int]:
    """The model directory of ``size`` (built once, random normal weights), and its weight bytes."""
    path = work / f"llama-{size}"
    if not (path / "config.json").is_file():
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(vocab_size=49152, tie_word_embeddings=True, max_position_embeddings=8192, **SHAPES[size])
        torch.manual_seed(0)
        with torch.device("meta"):
            model = LlamaForCausalLM(config)
        model = model.to_empty(device="cpu")
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, 0.02)
        model.tie_weights()
        model.save_pretrained(path)
    nbytes = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    return path, nbytes


def peak_of(cmd: list[str]) -> tuple[int, float, int]:
    """Peak resident bytes, wall seconds and exit status of ``cmd`` run in its own process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read()
    if proc.returncode:
        print(err[-2000:], file=sys.stderr)
    return usage.ru_maxrss * 1024, time.perf_counter() - start, proc.returncode


BASE = (
    "import torch, transformers, modelxray.app, modelxray.models.hf, resource;"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)"
)


def speed(path: Path, tokens: int, seq_len: int, rounds: int) -> tuple[float, float]:
    """Tokens/s of our scoring loop and of a bare loop over the same windows, in this process."""
    import torch
    from transformers import AutoModelForCausalLM

    from modelxray.measure.scoring import score_windows
    from modelxray.metrics.windows import batched, make_windows

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = torch.randint(0, 256, (tokens + 1,), generator=torch.Generator().manual_seed(0))
    windows = make_windows(ids, seq_len, "disjoint")
    batches = list(batched(windows, 1))
    n = sum(w.inputs.numel() for w in windows)

    def bare() -> float:
        start = time.perf_counter()
        with torch.inference_mode():
            for inputs, _ in batches:
                model(input_ids=inputs, use_cache=False)
        return time.perf_counter() - start

    bare()  # warm-up
    ours_t, bare_t = [], []
    for r in range(rounds):
        for name in ("ours", "bare") if r % 2 == 0 else ("bare", "ours"):
            if name == "ours":
                ours_t.append(score_windows(model, windows, 1, [1], progress=False)[1])
            else:
                bare_t.append(bare())
    return n / statistics.median(ours_t), n / statistics.median(bare_t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="135m,360m", help=f"comma-separated, of {', '.join(SHAPES)}")
    ap.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, of {', '.join(RUNS)}")
    ap.add_argument("--tokens", type=int, default=256, help="scored tokens per run")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of the speed comparison")
    ap.add_argument("--work", default="outputs/bench_scale", help="where the model directories are kept")
    ap.add_argument("--markdown", help="also write the table to this Markdown file")
    args = ap.parse_args()
    work = (ROOT / args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    sizes = args.sizes.split(",")
    runs = args.runs.split(",")
    unknown = [s for s in sizes if s not in SHAPES] + [r for r in runs if r not in RUNS]
    if unknown:
        sys.exit(f"unknown size or run {unknown[0]!r}: sizes {', '.join(SHAPES)}; runs {', '.join(RUNS)}")

    base, _, _ = peak_of([sys.executable, "-c", BASE])
    print(f"process before any model (python, torch, transformers, modelxray): {base / 2**30:.2f} GiB")
    sizes = ["tiny", *(s for s in sizes if s != "tiny")]
    fixed: dict[str, tuple[int, int]] = {}  # run -> (peak, weight bytes) on the tiny model
    header = "| size | weights | run | peak RSS | peak / weights | growth / weights | s / token |"
    lines = [header, "|---|---|---|---|---|---|---|"]
    speeds = ["| size | ours tokens/s | bare tokens/s | ours / bare |", "|---|---|---|---|"]
    print(header)
    for size in sizes:
        path, nbytes = build(size, work)
        for run in runs:
            cmd = [
                sys.executable,
                "run.py",
                "model=hf",
                f"model.name_or_path={path}",
                "model.tokenizer=byte",
                f"dataset.max_tokens={args.tokens}",
                f"dataset.seq_len={args.seq_len}",
                "tracker=none",
                "progress=false",
                "report.dashboard=false",
                f"hydra.run.dir={work}/runs/{size}-{run.replace(' ', '-')}",
                *RUNS[run],
            ]
            peak, secs, code = peak_of(cmd)
            fixed.setdefault(run, (peak, nbytes))
            growth = (peak - fixed[run][0]) / (nbytes - fixed[run][1]) if size != "tiny" else math.nan
            line = (
                f"| {size} | {nbytes / 2**30:.2f} GiB | {run} | {peak / 2**30:.2f} GiB | {peak / nbytes:.2f} | "
                f"{growth:.2f} | {secs / args.tokens:.3f} |" + ("" if code == 0 else f" (exit {code})")
            )
            lines.append(line)
            print(line, flush=True)
        ours, bare = speed(path, args.tokens, args.seq_len, args.rounds)
        speeds.append(f"| {size} | {ours:.1f} | {bare:.1f} | {ours / bare:.3f} |")
    print()
    print("\n".join(speeds))
    if args.markdown:
        Path(args.markdown).write_text("\n".join([*lines, "", *speeds]) + "\n")


if __name__ == "__main__":
    main()
