"""Benchmark: memory and speed as the model grows. Random-weight Llama models with the shapes of
SmolLM2-135M, -360M and -1.7B are built from configs and saved as Hugging Face directories; each
is then run through the analyzers and quantizers as ``python run.py model=hf ...`` in its own
process, and scored by our evaluation loop and by a bare ``model(input_ids)`` loop in one process.

    python scripts/bench_scale.py                            # 135m and 360m, 256 tokens
    python scripts/bench_scale.py --sizes 135m,360m,1.7b --tokens 512 --markdown docs/scale.md

Prints, per size: the weight bytes and the peak of a bare loop, a process of its own that loads the
same directory with ``AutoModelForCausalLM.from_pretrained`` (float32, as ``model=hf``) and scores the
same windows in the same batches with ``F.cross_entropy``, nothing else (no quantization, no report);
for each run its peak resident memory over the weight bytes (targets: 1.15 for a single run with a
quantizer, 1.3 for bitwidth, quant_impact and robustness), over the bare loop's peak (target: 1.10 for
a single run with a quantizer; both peaks are the process's ``ru_maxrss``, mapped weight files
included) and the growth: the peak above the same run's peak on a 2-layer model (the fixed cost of
Python, torch, transformers and the report), over the weight bytes above that model's; seconds per
scored token; and our loop's tokens/s over a bare forward loop's and over a bare perplexity loop's
(forward plus cross-entropy; target >= 0.97), timed in alternating rounds in one process. The
2-layer model (``tiny``) always runs first: ``--sizes tiny`` alone checks the script itself in a minute.

``--token-sweep 256,1024,4096`` adds the growth with tokens: each run again on the first size at
each token count, with its peak memory (flat: windows are scored one batch at a time) and the
seconds each further token costs between counts (flat: the work per token does not grow).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
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
    "performance int8": [
        "analyzer=performance",
        "quant=int8",
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


EVAL_BATCH = 4  # analyzer.performance.batch_size's default: windows per forward of the perplexity pass


def bare_loop(path: str, tokens: int, seq_len: int, batch_size: int = EVAL_BATCH) -> None:
    """The bare loop (run in its own process, ``--bare-loop``): load the model as ``model=hf`` does
    (float32) and score the run's windows - ``tokens`` ids cut into disjoint ``seq_len`` windows,
    ``batch_size`` per forward, as ``analyzer=performance`` batches them - with ``F.cross_entropy``."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    from modelxray.metrics.windows import batched, make_windows  # the run's own windows and batches

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = torch.randint(0, 256, (tokens,), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        for inputs, targets in batched(make_windows(ids, seq_len, "disjoint"), batch_size):
            logits = model(input_ids=inputs, use_cache=False).logits
            F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100, reduction="sum")


def bare_loop_command(path: Path, tokens: int, seq_len: int) -> list[str]:
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        "--bare-loop",
        str(path),
        "--tokens",
        str(tokens),
        "--seq-len",
        str(seq_len),
    ]


def speed(path: Path, tokens: int, seq_len: int, rounds: int) -> tuple[float, float, float]:
    """Tokens/s of our scoring loop, of a bare forward loop and of a bare perplexity loop (the
    forward plus ``F.cross_entropy``, what a hand-written evaluation does) over the same windows,
    timed in alternating rounds in this process."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    from modelxray.measure.scoring import score_windows
    from modelxray.metrics.windows import batched, make_windows

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = torch.randint(0, 256, (tokens + 1,), generator=torch.Generator().manual_seed(0))
    windows = make_windows(ids, seq_len, "disjoint")
    batches = list(batched(windows, 1))
    n = sum(w.inputs.numel() for w in windows)

    def bare(loss: bool) -> float:
        start = time.perf_counter()
        with torch.inference_mode():
            for inputs, targets in batches:
                logits = model(input_ids=inputs, use_cache=False).logits
                if loss:
                    F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100, reduction="sum")
        return time.perf_counter() - start

    loops = {
        "ours": lambda: score_windows(model, windows, 1, [1], progress=False)[1],
        "bare": lambda: bare(False),
        "bare+loss": lambda: bare(True),
    }
    bare(False)  # warm-up
    times: dict[str, list[float]] = {name: [] for name in loops}
    for r in range(rounds):
        for name in list(loops) if r % 2 == 0 else list(loops)[::-1]:
            times[name].append(loops[name]())
    ours, fwd, ppl = (n / statistics.median(times[name]) for name in loops)
    return ours, fwd, ppl


def run_command(path: Path, run: str, tokens: int, seq_len: int, run_dir: Path) -> list[str]:
    """``python run.py`` on the model directory ``path`` with the overrides of ``run``."""
    return [
        sys.executable,
        "run.py",
        "model=hf",
        f"model.name_or_path={path}",
        "model.tokenizer=byte",
        f"dataset.max_tokens={tokens}",
        f"dataset.seq_len={seq_len}",
        "tracker=none",
        "progress=false",
        "report.dashboard=false",
        f"hydra.run.dir={run_dir}",
        *RUNS[run],
    ]


def token_sweep(path: Path, size: str, runs: list[str], counts: list[int], seq_len: int, work: Path) -> list[str]:
    """Each run at each token count: peak memory against the smallest count's, and the seconds each
    token beyond the previous count cost."""
    lines = [
        f"| tokens ({size}) | run | peak RSS | peak / peak at {counts[0]} | wall s | s / further token |",
        "|---|---|---|---|---|---|",
    ]
    print(lines[0], flush=True)
    for run in runs:
        first = previous = None
        for n in counts:
            peak, secs, code = peak_of(
                run_command(path, run, n, seq_len, work / "runs" / f"tokens-{n}-{run.replace(' ', '-')}")
            )
            first = first or peak
            further = "" if previous is None else f"{(secs - previous[1]) / (n - previous[0]):.4f}"
            line = f"| {n} | {run} | {peak / 2**30:.2f} GiB | {peak / first:.2f} | {secs:.1f} | {further} |" + (
                "" if code == 0 else f" (exit {code})"
            )
            lines.append(line)
            print(line, flush=True)
            previous = (n, secs)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="135m,360m", help=f"comma-separated, of {', '.join(SHAPES)}")
    ap.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, of {', '.join(RUNS)}")
    ap.add_argument("--tokens", type=int, default=256, help="scored tokens per run")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of the speed comparison")
    ap.add_argument("--work", default="outputs/bench_scale", help="where the model directories are kept")
    ap.add_argument("--markdown", help="also write the table to this Markdown file")
    ap.add_argument("--token-sweep", help="comma-separated token counts: each run again at each, on the first size")
    ap.add_argument("--bare-loop", metavar="DIR", help=argparse.SUPPRESS)  # the bare loop's own process
    args = ap.parse_args()
    if args.bare_loop:
        bare_loop(args.bare_loop, args.tokens, args.seq_len)
        return
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
    header = "| size | weights | run | peak RSS | peak / weights | peak / bare loop | growth / weights | s / token |"
    lines = [header, "|---|---|---|---|---|---|---|---|"]
    speeds = [
        "| size | ours tokens/s | bare forward tokens/s | ours / bare forward | bare forward + loss tokens/s | ours / bare + loss |",
        "|---|---|---|---|---|---|",
    ]
    print(header)
    for size in sizes:
        path, nbytes = build(size, work)
        bare, secs, code = peak_of(bare_loop_command(path, args.tokens, args.seq_len))
        line = (
            f"| {size} | {nbytes / 2**30:.2f} GiB | bare loop | {bare / 2**30:.2f} GiB | {bare / nbytes:.2f} | 1.00 | "
            f"| {secs / args.tokens:.3f} |" + ("" if code == 0 else f" (exit {code})")
        )
        lines.append(line)
        print(line, flush=True)
        for run in runs:
            cmd = run_command(path, run, args.tokens, args.seq_len, work / "runs" / f"{size}-{run.replace(' ', '-')}")
            peak, secs, code = peak_of(cmd)
            fixed.setdefault(run, (peak, nbytes))
            growth = (peak - fixed[run][0]) / (nbytes - fixed[run][1]) if size != "tiny" else math.nan
            line = (
                f"| {size} | {nbytes / 2**30:.2f} GiB | {run} | {peak / 2**30:.2f} GiB | {peak / nbytes:.2f} | "
                f"{peak / bare:.2f} | {growth:.2f} | {secs / args.tokens:.3f} |"
                + ("" if code == 0 else f" (exit {code})")
            )
            lines.append(line)
            print(line, flush=True)
        # in a fresh process: a forked run.py starts with this process's memory, which would then
        # count in its peak (the model loaded here stays mapped after it is freed)
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            ours, fwd, ppl = pool.submit(speed, path, args.tokens, args.seq_len, args.rounds).result()
        speeds.append(f"| {size} | {ours:.1f} | {fwd:.1f} | {ours / fwd:.3f} | {ppl:.1f} | {ours / ppl:.3f} |")
    print()
    print("\n".join(speeds))
    tokens = []
    if args.token_sweep:
        first = next(s for s in sizes if s != "tiny") if len(sizes) > 1 else sizes[0]
        counts = sorted(int(n) for n in args.token_sweep.split(","))
        print()
        tokens = ["", *token_sweep(build(first, work)[0], first, runs, counts, args.seq_len, work)]
    if args.markdown:
        Path(args.markdown).write_text("\n".join([*lines, "", *speeds, *tokens]) + "\n")


if __name__ == "__main__":
    main()
