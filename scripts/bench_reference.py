"""Benchmark: comparing N model variants with one reference (``reference=``) against scoring the
reference and each variant in plain runs, and the memory of a run with a reference.

    python scripts/bench_reference.py                  # a 4-layer GPT-2 (random weights), 3 variants
    python scripts/bench_reference.py --variants 5 --layers 6 --width 384

Prints:
- **time**: N runs ``model=variant reference=base`` (the first scores the reference and caches its
  outputs, the others read them) against N+1 plain runs (the base and each variant). The target is a
  ratio of at most about 1: the reference is scored once for the whole sweep.
- **peak memory**: the peak resident memory of one such run, against a bare loop that loads the
  larger model and scores the same windows. The target is at most 1.15x: the reference leaves before
  the model loads, so one model is resident at a time.

Every run is in-process except the two memory measurements, each a fresh process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

FAST = [
    "tracker=none",
    "progress=false",
    "analyzer=[performance]",
    "analyzer.performance.iters=1",
    "analyzer.performance.speed_batch_sizes=[1]",
    "analyzer.performance.layer_timing=false",
    "report.dashboard=false",
]


def build(root: Path, layers: int, width: int, variants: int, seq_len: int) -> tuple[Path, list[Path]]:
    """A random GPT-2 directory and ``variants`` noised copies of it."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=layers, n_embd=width, n_head=4, vocab_size=257, n_positions=seq_len)
    torch.manual_seed(0)
    base = GPT2LMHeadModel(config).eval()
    base.save_pretrained(root / "base")
    out = []
    for i in range(variants):
        torch.manual_seed(0)
        model = GPT2LMHeadModel(config).eval()
        g = torch.Generator().manual_seed(i + 1)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01 * (i + 1) * torch.randn(p.shape, generator=g))
        model.save_pretrained(root / f"variant{i}")
        out.append(root / f"variant{i}")
    return root / "base", out


def timed(args: list[str], out: Path) -> float:
    import modelxray

    start = time.perf_counter()
    result = modelxray.analyze(args, output_dir=out)
    assert not result.failed, result.results["performance"].error
    return time.perf_counter() - start


def peak_rss_of(code: str) -> int:
    """The peak resident memory (bytes) of a fresh Python process running ``code``."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", type=int, default=3)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument(
        "--mem-layers", type=int, default=12, help="the memory pair: large enough that imports weigh little"
    )
    ap.add_argument("--mem-width", type=int, default=768)
    args = ap.parse_args()
    data = [f"dataset.max_tokens={args.tokens}", f"dataset.seq_len={args.seq_len}"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base, variants = build(root, args.layers, args.width, args.variants, args.seq_len)
        cache = f"runtime.reference_cache_dir={root / 'cache'}"
        timed([*FAST, *data, "model=file", f"model.path={base}"], root / "warm")  # imports and first-call costs
        with_ref = [
            timed(
                [*FAST, *data, "model=file", f"model.path={v}", "reference=file", f"reference.path={base}", cache],
                root / f"ref{i}",
            )
            for i, v in enumerate(variants)
        ]
        plain = [
            timed([*FAST, *data, "model=file", f"model.path={m}"], root / f"plain{i}")
            for i, m in enumerate([base, *variants])
        ]
        n = len(variants)
        print(
            f"{n} variants against one reference: {sum(with_ref):.1f} s (first {with_ref[0]:.1f} s, then median "
            f"{statistics.median(with_ref[1:] or with_ref):.1f} s)"
        )
        print(f"{n + 1} plain runs (the reference and each variant): {sum(plain):.1f} s")
        print(f"ratio: {sum(with_ref) / sum(plain):.2f} (target <= about 1: the reference is scored once)")

        big_base, (big,) = build(root / "big", args.mem_layers, args.mem_width, 1, args.seq_len)
        overrides = [*FAST, *data, "model=file", f"model.path={big}", "reference=file",
                     f"reference.path={big_base}", "runtime.reference_cache_dir=null"]  # fmt: skip
        run = (
            "import resource, modelxray; "
            f"modelxray.analyze({json.dumps(overrides)}, output_dir={str(root / 'mem')!r}); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)"
        )
        bare = (
            "import resource, torch\n"
            "from transformers import GPT2LMHeadModel\n"
            f"m = GPT2LMHeadModel.from_pretrained({str(big)!r}).eval()\n"
            "from pydoc_data.topics import topics\n"
            "ids = torch.tensor(list('\\n\\n'.join(topics[k] for k in sorted(topics)).encode()[:"
            f"{args.tokens}])).view(-1, {args.seq_len})\n"
            "with torch.inference_mode():\n"
            "    for i in range(0, ids.shape[0], 4):\n"
            "        m(ids[i:i + 4])\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)\n"
        )
        ours, loop = peak_rss_of(run), peak_rss_of(bare)
        print(
            f"peak RSS of a run with a reference ({args.mem_layers} layers x {args.mem_width}): {ours / 2**20:.0f} MiB; bare loop of the model: "
            f"{loop / 2**20:.0f} MiB; ratio {ours / loop:.2f} (target <= 1.15)"
        )


if __name__ == "__main__":
    main()
