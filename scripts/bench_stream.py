"""Benchmark: a model streamed from disk block by block (``runtime.offload=blocks``) against the same
run with the whole model in memory (``runtime.offload=none``), on random Llamas with 7B-sized layers
(hidden 4096, MLP 11008, vocabulary 32,000, untied head) at several depths.

    python scripts/bench_stream.py                         # 4 and 8 layers (7.5 GB in float32 at 8)
    python scripts/bench_stream.py --layers 4,8,16 --in-memory 4,8 --markdown
    python scripts/bench_stream.py --small              # hidden 256: checks the script in a minute

Each model is written once as sharded safetensors (one shard per layer) under ``--dir``, by a
process of its own: a run's peak (``ru_maxrss``) counts the memory of the process it was forked
from, so this one imports no torch and stays small. Each run is ``python run.py model=hf ... quant=int4``
with performance on 512 tokens, in its own process; the files are read once before each run so both
runs find them in the page cache. Prints, per depth and mode: the peak resident memory of the run's
process (``wait4``'s ru_maxrss), that peak over the float32 weights (target: at most 0.45 at 8 layers,
falling with depth), wall seconds and the streamed run's seconds over the in-memory run's (target:
at most 1.3), and whether both runs gave the same perplexity and KL.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPE = dict(
    hidden_size=4096, intermediate_size=11008, num_attention_heads=32, num_key_value_heads=32, vocab_size=32000
)


def write_model(path: Path, layers: int) -> int:
    """A random Llama of ``layers`` 7B-sized layers as sharded safetensors; returns its float32 bytes."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig

    if (path / "model.safetensors.index.json").is_file():
        index = json.loads((path / "model.safetensors.index.json").read_text())
        return int(index["metadata"]["total_size"])
    path.mkdir(parents=True, exist_ok=True)
    config = LlamaConfig(**SHAPE, num_hidden_layers=layers, max_position_embeddings=2048, tie_word_embeddings=False)
    config.save_pretrained(path)
    h, m, v = SHAPE["hidden_size"], SHAPE["intermediate_size"], SHAPE["vocab_size"]
    gen = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=gen) * 0.02

    shards: list[dict[str, torch.Tensor]] = [{"model.embed_tokens.weight": rand(v, h)}]
    for i in range(layers):
        p = f"model.layers.{i}."
        shards.append(
            {
                p + "self_attn.q_proj.weight": rand(h, h),
                p + "self_attn.k_proj.weight": rand(h, h),
                p + "self_attn.v_proj.weight": rand(h, h),
                p + "self_attn.o_proj.weight": rand(h, h),
                p + "mlp.gate_proj.weight": rand(m, h),
                p + "mlp.up_proj.weight": rand(m, h),
                p + "mlp.down_proj.weight": rand(h, m),
                p + "input_layernorm.weight": torch.ones(h),
                p + "post_attention_layernorm.weight": torch.ones(h),
            }
        )
    shards.append({"model.norm.weight": torch.ones(h), "lm_head.weight": rand(v, h)})
    weight_map, total = {}, 0
    for n, shard in enumerate(shards):
        name = f"model-{n + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(path / name), metadata={"format": "pt"})
        for key, tensor in shard.items():
            weight_map[key] = name
            total += tensor.numel() * 4
        shards[n] = {}
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    return total


def warm(path: Path) -> None:
    """Read every file once, so the run finds them in the page cache."""
    for file in sorted(path.iterdir()):
        with open(file, "rb") as handle:
            while handle.read(1 << 26):
                pass


def run(path: Path, mode: str, out: Path, tokens: int) -> dict:
    """One ``python run.py`` of the model in its own process: its peak RSS, seconds and figures."""
    args = [
        sys.executable,
        str(ROOT / "run.py"),
        "model=hf",
        f"model.name_or_path={path}",
        "model.tokenizer=byte",
        f"dataset.max_tokens={tokens}",
        "dataset.seq_len=128",
        "quant=int4",
        f"runtime.offload={mode}",
        "analyzer.performance.speed_batch_sizes=[1]",
        "analyzer.performance.iters=1",
        "analyzer.performance.layer_timing=false",
        "report.dashboard=false",
        "progress=false",
        "tracker=none",
        f"hydra.run.dir={out}",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    proc = subprocess.Popen(args, cwd=out.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"{mode} run failed:\n{output[-3000:]}")
    results = json.loads((out / "analysis_results.json").read_text())["results"]
    metrics = results["performance"]["metrics"]
    return {
        "peak": usage.ru_maxrss * 1024,
        "seconds": seconds,
        "perplexity": metrics["perplexity"],
        "kl": metrics.get("kl"),
    }


def _num(value, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", default="4,8", help="depths to build, comma-separated")
    parser.add_argument("--in-memory", default="4,8", help="depths also run with the whole model in memory")
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--dir", default=str(Path.home() / ".cache" / "modelxray" / "bench_stream"))
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown (docs/scale.md)")
    parser.add_argument(
        "--small", action="store_true", help="hidden 256 and a 1,000-token vocabulary: checks the script in a minute"
    )
    args = parser.parse_args()
    base = Path(args.dir)
    if args.small:
        SHAPE.update(
            hidden_size=256, intermediate_size=688, num_attention_heads=4, num_key_value_heads=4, vocab_size=1000
        )
        base = base / "small"
    rows = []
    in_memory = {int(x) for x in args.in_memory.split(",") if x}
    for layers in (int(x) for x in args.layers.split(",")):
        path = base / f"llama7b_{layers}l"
        shape = json.dumps(SHAPE)
        subprocess.run([sys.executable, __file__, "--write", str(path), str(layers), shape], check=True)
        weights = int(json.loads((path / "model.safetensors.index.json").read_text())["metadata"]["total_size"])
        got = {}
        for mode in ("blocks", "none") if layers in in_memory else ("blocks",):
            warm(path)
            out = base / "runs" / f"{layers}l_{mode}"
            got[mode] = run(path, mode, out, args.tokens)
            r = got[mode]
            print(
                f"{layers:>2} layers, {weights / 1e9:.2f} GB float32, offload={mode:<6}: peak {r['peak'] / 1e9:.2f} GB "
                f"= {r['peak'] / weights:.3f}x the weights, {r['seconds']:.1f} s, perplexity {r['perplexity']:.4f}, "
                f"KL {r['kl']:.3g}",
                flush=True,
            )
        row = {"layers": layers, "weights": weights, **{f"{m}_{k}": v for m, r in got.items() for k, v in r.items()}}
        if "none" in got:
            row["time_ratio"] = got["blocks"]["seconds"] / got["none"]["seconds"]
            row["same"] = abs(got["blocks"]["perplexity"] / got["none"]["perplexity"] - 1) < 1e-4 and abs(
                got["blocks"]["kl"] - got["none"]["kl"]
            ) <= 1e-4 * max(abs(got["none"]["kl"]), 1e-12)
            print(f"   streamed / in memory: {row['time_ratio']:.2f}x the time; same figures: {row['same']}")
        rows.append(row)
    if args.markdown:
        print(
            "\n| layers | float32 weights | streamed peak RSS | peak / weights | in-memory peak RSS | streamed s | in-memory s | time ratio | same figures |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            mem = r.get("none_peak")
            print(
                f"| {r['layers']} | {r['weights'] / 1e9:.2f} GB | {r['blocks_peak'] / 1e9:.2f} GB | "
                f"{r['blocks_peak'] / r['weights']:.3f} | {f'{mem / 1e9:.2f} GB' if mem else 'n/a'} | "
                f"{r['blocks_seconds']:.0f} | {_num(r.get('none_seconds'), '.0f')} | "
                f"{_num(r.get('time_ratio'), '.2f')} | {r.get('same', 'n/a')} |"
            )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:  # the writer process: python bench_stream.py --write DIR LAYERS SHAPE
        SHAPE.update(json.loads(sys.argv[4]))
        write_model(Path(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
