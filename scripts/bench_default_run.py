"""``python run.py`` on the embedded default against its floor, both whole processes, rounds
alternating, medians reported.

The floor is what the run cannot do without: a plain script that imports torch and transformers,
loads the same GGUF file with transformers (``from_pretrained(..., gguf_file=...)``, dequantized to
float32 as modelxray does) and runs a bare perplexity loop (forward, cross-entropy) over the same
token windows in the same batches. modelxray does more than that: a speed benchmark, per-module
times, memory, greedy outputs, the report and its plots, MLflow. Where the rest goes is read from
the run's own log (each stage's time) and printed beside the ratio (target 1.3).

    python scripts/bench_default_run.py                  # 3 rounds, about 8 minutes on 2 idle cores
    python scripts/bench_default_run.py --rounds 1

Our run loads the converted weights from its disk cache (a first run converts the GGUF once, about
30 s; ``scripts/bench_eval.py`` times that); the floor's transformers load dequantizes every time,
which is what a plain script pays.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = 1.3

FLOOR = r"""
import sys, time
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

gguf, ids_path, seq_len, batch_size, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(threads)
start = time.perf_counter()
from pathlib import Path
model = AutoModelForCausalLM.from_pretrained(str(Path(gguf).parent), gguf_file=Path(gguf).name, dtype=torch.float32).eval()
loaded = time.perf_counter()
ids = torch.load(ids_path)
n = ids.numel() // seq_len
windows = ids[: n * seq_len].view(n, seq_len)
total, count = 0.0, 0
with torch.inference_mode():
    for batch in windows.split(batch_size):
        logits = model(batch).logits[:, :-1]
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="sum")
        total, count = total + loss.item(), count + batch[:, 1:].numel()
print(f"FLOOR load_s={loaded - start:.2f} loop_s={time.perf_counter() - loaded:.2f} ppl={torch.tensor(total / count).exp():.4f}")
"""
STAGE = re.compile(r"\[(?P<t>[\d-]+ [\d:,]+)\]\[[\w.]+\]\[INFO\] - (?P<msg>.*)")


def _tokens_and_settings(work: Path) -> tuple[str, Path, int, int, int]:
    """The GGUF file, the run's token ids (saved for the floor), its window, batch size and threads."""
    import torch

    from modelxray.api import compose
    from modelxray.app.orchestration import default_threads
    from modelxray.core.instantiate import build_component

    cfg = compose([])
    source = build_component(cfg.model, "model")
    data = build_component(cfg.dataset, "dataset").load(source.load().tokenizer)
    ids_path = work / "ids.pt"
    torch.save(data.ids.clone(), ids_path)
    threads = cfg.threads or default_threads()
    return str(source.resolved_file()), ids_path, data.seq_len, cfg.analyzer.performance.batch_size, threads


def _timed(what: str, args: list[str], work: Path, env: dict) -> tuple[float, str]:
    """Wall seconds and stdout of one whole process; its failure ends the benchmark with its stderr."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], cwd=work, env={**os.environ, **env}, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed:\n{proc.stderr[-3000:]}")
    return wall, proc.stdout


def _run_ours(work: Path) -> tuple[float, str]:
    out = work / "ours"
    args = [str(ROOT / "run.py"), "progress=false", f"hydra.run.dir={out}"]
    wall, _ = _timed("python run.py", args, work, {"HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")})
    return wall, (out / "run.log").read_text()


def _run_floor(work: Path, gguf: str, ids: Path, seq_len: int, batch: int, threads: int) -> tuple[float, str]:
    script = work / "floor.py"
    script.write_text(FLOOR)
    args = [str(script), gguf, str(ids), str(seq_len), str(batch), str(threads)]
    wall, stdout = _timed("the floor script", args, work, {"HF_HUB_OFFLINE": "1"})
    return wall, next(line for line in stdout.splitlines() if line.startswith("FLOOR"))


def stages(log: str) -> list[tuple[str, float]]:
    """``(what, seconds)`` between consecutive lines of the run's log: where its time went after
    logging started (the imports before the first line are the rest of the wall time)."""
    import datetime as dt

    stamps = []
    for line in log.splitlines():
        m = STAGE.match(line)
        if m:
            stamps.append((dt.datetime.strptime(m["t"], "%Y-%m-%d %H:%M:%S,%f"), m["msg"][:90]))
    return [(msg, (t1 - t0).total_seconds()) for (t0, _), (t1, msg) in zip(stamps, stamps[1:])]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        gguf, ids, seq_len, batch, threads = _tokens_and_settings(work)
        print(
            f"GGUF {gguf}; {ids.stat().st_size // 8:,} tokens in windows of {seq_len}, batch {batch}, {threads} threads"
        )
        load = os.getloadavg()[0]
        ours, floor, floor_lines, log = [], [], [], ""
        for r in range(args.rounds):
            order = ("ours", "floor") if r % 2 == 0 else ("floor", "ours")
            for name in order:
                if name == "ours":
                    wall, log = _run_ours(work)
                    ours.append(wall)
                else:
                    wall, line = _run_floor(work, gguf, ids, seq_len, batch, threads)
                    floor.append(wall)
                    floor_lines.append(line)
            print(f"round {r + 1}: ours {ours[-1]:.1f} s, floor {floor[-1]:.1f} s ({floor_lines[-1]})", flush=True)
        o, f = statistics.median(ours), statistics.median(floor)
        print(
            f"\nload average {load:.2f} before, {os.getloadavg()[0]:.2f} after (2 cores: above 0.5 is a busy machine)"
        )
        print(f"python run.py: {o:.1f} s; floor (transformers GGUF load + bare perplexity loop): {f:.1f} s")
        print(f"ratio {o / f:.2f} (target {TARGET}); rounds: {', '.join(f'{a / b:.2f}' for a, b in zip(ours, floor))}")
        print("\nwhere the last run's time went after its log began (seconds to each line):")
        for msg, secs in stages(log):
            if secs >= 0.2:
                print(f"  {secs:6.1f}  {msg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
