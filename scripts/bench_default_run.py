"""``python run.py`` on the embedded default against its floor, both whole processes, rounds
alternating, medians reported.

The floor is what the run cannot do without: a plain script that imports torch and transformers,
loads the same GGUF file with transformers (``from_pretrained(..., gguf_file=...)``, dequantized to
float32 as modelxray does) and runs a bare perplexity loop (forward, cross-entropy) over the same
token windows in the same batches. modelxray does more than that: a speed benchmark, per-module
times, memory, greedy outputs, the report and its plots, MLflow. Where the rest goes is printed
beside the ratio (target 1.3): our process runs through a small wrapper that times the run's own
stages and the performance analyzer's parts (the timers cost microseconds); the table is the median
over the rounds of each phase.

    python scripts/bench_default_run.py                  # 3 rounds, about 8 minutes on 2 idle cores
    python scripts/bench_default_run.py --rounds 1

Our run loads the converted weights from its disk cache (a first run converts the GGUF once, about
30 s; ``scripts/bench_eval.py`` times that); the floor's transformers load dequantizes every time,
which is what a plain script pays.
"""

from __future__ import annotations

import argparse
import json
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
# Runs ``run.py <args>`` with timers around the run's stages and parts; writes them to $MX_BENCH_PHASES.
RUNNER = r"""
import json, os, sys, time
T0 = time.perf_counter()
from phase_timers import add, exit_code_of, phases, time_attr, timing
sys.argv = ["run.py", *sys.argv[1:]]


t = time.perf_counter()
import modelxray.cli as cli
add("import the command line (Hydra, OmegaConf)", time.perf_counter() - t)
T_MAIN = time.perf_counter()
t = time.perf_counter()
import modelxray.app as app
add("import the run's modules (torch, numpy)", time.perf_counter() - t)
import modelxray.analyzers.performance.run as perf
import modelxray.app.loading as loading
import modelxray.app.orchestration as orch
import modelxray.config.components as components
import modelxray.models.process_cache as process_cache
import modelxray.report.writer as writer
import modelxray.tracking.mlflow_run as mlflow_run
import modelxray.tracking.mlflow_tracker as mlflow_tracker

time_attr(components, "validate_config", "config composed, built and checked")
orch.STAGES = tuple((name, timing(fn, f"stage: {name}")) for name, fn in orch.STAGES)
time_attr(loading, "optional_libraries_on_use", "transformers' model code imported (before the stages)")
time_attr(process_cache, "lookup", "  load: the model built, its cached weights read")
time_attr(loading, "load_subject", "  load: the two above, the dataset and its checks")
time_attr(mlflow_tracker.MlflowTracker, "start", "  start tracking: MLflow imported, run opened")
for part, label in [
    ("_quality", "perplexity over the windows"),
    ("_speed", "speed benchmark"),
    ("_memory", "memory"),
    ("_consistency", "consistency checks"),
    ("_layers", "per-module times"),
]:
    time_attr(perf, part, f"  analyze: {label}")
time_attr(writer, "_draw", "  analyze: figures drawn and saved")
time_attr(mlflow_run.MlflowRun, "log_artifacts", "  finish tracking: MLflow artifacts")
code = 0
try:
    code = exit_code_of(cli.main)
finally:
    phases["in the wrapper"] = time.perf_counter() - T0
    phases["the command line's own work (Hydra composes the config, the job's folder)"] = (
        time.perf_counter() - T_MAIN - sum(v for k, v in phases.items() if k.startswith(("stage:", "import the run", "config", "transformers")))
    )
    with open(os.environ["MX_BENCH_PHASES"], "w") as f:
        json.dump(phases, f)
cli.exit_promptly(code)  # as python run.py ends
"""


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


def _run_ours(work: Path, round_: int) -> tuple[float, dict[str, float]]:
    """Wall seconds of ``python run.py`` (through the timing wrapper) and its phases."""
    out, phases_file = work / f"ours{round_}", work / f"phases{round_}.json"
    args = ["-c", RUNNER, "progress=false", f"hydra.run.dir={out}"]
    env = {
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "scripts")]),
        "MX_BENCH_PHASES": str(phases_file),
    }
    wall, _ = _timed("python run.py", args, work, env)
    phases = json.loads(phases_file.read_text())
    phases["interpreter start and exit"] = wall - phases.pop("in the wrapper")
    return wall, phases


def _run_floor(work: Path, gguf: str, ids: Path, seq_len: int, batch: int, threads: int) -> tuple[float, str]:
    script = work / "floor.py"
    script.write_text(FLOOR)
    args = [str(script), gguf, str(ids), str(seq_len), str(batch), str(threads)]
    wall, stdout = _timed("the floor script", args, work, {"HF_HUB_OFFLINE": "1"})
    return wall, next(line for line in stdout.splitlines() if line.startswith("FLOOR"))


def _ordered(labels: list[str]) -> list[str]:
    """Top-level phases in the order they ended, each stage followed by its parts ("  <stage>...")."""
    out = []
    for label in labels:
        if label.startswith("  "):
            continue
        out.append(label)
        if label.startswith("stage: "):
            stage = label.removeprefix("stage: ")
            out += [x for x in labels if x.startswith(f"  {stage}")]
    return out + [x for x in labels if x.startswith("  ") and x not in out]


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
        ours, floor, floor_lines, phases = [], [], [], []
        for r in range(args.rounds):
            order = ("ours", "floor") if r % 2 == 0 else ("floor", "ours")
            for name in order:
                if name == "ours":
                    wall, parts = _run_ours(work, r)
                    ours.append(wall)
                    phases.append(parts)
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
        floor_load = statistics.median(float(re.search(r"load_s=([\d.]+)", x)[1]) for x in floor_lines)
        floor_loop = statistics.median(float(re.search(r"loop_s=([\d.]+)", x)[1]) for x in floor_lines)
        print(
            f"\nwhere the time goes (median over the rounds; the floor: load {floor_load:.1f} s, loop {floor_loop:.1f} s)"
        )
        print("\n| phase of python run.py | seconds |\n|---|---|")
        for label in _ordered(list(phases[0])):
            secs = statistics.median(p.get(label, 0.0) for p in phases)
            print(f"| {label.replace('  ', '&nbsp;&nbsp;')} | {secs:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
