"""``python run.py experiment=grokking`` end to end against a plain PyTorch script doing the same
training; every ratio is measured in this one run (rounds alternate, medians reported).

The plain script is what a researcher would write by hand: import torch, build the same modular-
addition split and MLP (one-hot a, b -> 512 ReLU -> p, no bias, seeded), train it full batch with
the same AdamW for the same steps, evaluate train and test accuracy every ``eval_every`` steps and
save the curves as JSON. Both are whole processes (interpreter, imports, data, training, output).

modelxray does more than that: per-example statistics, gradient flow, memorization and feature
snapshots (the experiment's callbacks), the report and its plots, and MLflow logging. The table
splits its wall clock into start-up (imports, config, store), training steps, callbacks, and the
rest (report, plots, logging), from the run's own timings.

    python scripts/bench_grokking.py                 # 4,000 steps, 3 rounds
    python scripts/bench_grokking.py --steps 1000 --repeat 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

PLAIN = r"""
import json, sys, time
import torch
import torch.nn.functional as F

steps, eval_every, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
p, hidden, train_fraction = 59, 512, 0.5
torch.manual_seed(0)
a, b = torch.meshgrid(torch.arange(p), torch.arange(p), indexing="ij")
x = torch.stack([a.flatten(), b.flatten()], dim=1)
y = (x[:, 0] + x[:, 1]) % p
perm = torch.randperm(p * p, generator=torch.Generator().manual_seed(0))
n = round(train_fraction * p * p)
x_train, y_train, x_test, y_test = x[perm[:n]], y[perm[:n]], x[perm[n:]], y[perm[n:]]


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(2 * p, hidden, bias=False)
        self.out = torch.nn.Linear(hidden, p, bias=False)

    def forward(self, x):
        w = self.fc1.weight.t()
        h = F.embedding(x[:, 0], w) + F.embedding(x[:, 1] + p, w)
        return self.out(torch.relu(h))


model = MLP()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1.0, betas=(0.9, 0.98))
curves = []


def evaluate(step):
    with torch.no_grad():
        train_acc = (model(x_train).argmax(-1) == y_train).float().mean().item()
        test_acc = (model(x_test).argmax(-1) == y_test).float().mean().item()
    curves.append({"step": step, "train_accuracy": train_acc, "test_accuracy": test_acc})


evaluate(0)
start = time.perf_counter()
for step in range(1, steps + 1):
    loss = F.cross_entropy(model(x_train), y_train)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if step % eval_every == 0:
        evaluate(step)
json.dump({"train_seconds": time.perf_counter() - start, "curves": curves}, open(out, "w"))
"""


NO_CALLBACKS = [
    *(f"train.learning.{k}.enabled=false" for k in ("examples", "grad_flow", "memorization", "features")),
    *(f"train.dynamics.{k}.enabled=false" for k in ("param_change", "grad", "optim")),
]


def run_plain(steps: int, eval_every: int, folder: Path) -> dict:
    out = folder / "plain.json"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", PLAIN, str(steps), str(eval_every), str(out)], check=True)
    wall = time.perf_counter() - t0
    data = json.loads(out.read_text())
    return {"wall": wall, "train": data["train_seconds"], "test_accuracy": data["curves"][-1]["test_accuracy"]}


def run_modelxray(steps: int, eval_every: int, folder: Path, extra: list[str]) -> dict:
    out = folder / f"mx{time.time_ns()}"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [
        sys.executable,
        str(REPO / "run.py"),
        "experiment=grokking",
        f"train.steps={steps}",
        f"train.eval_every={eval_every}",
        "progress=false",
        f"tracker.uri=sqlite:///{folder}/mlflow.db",
        f"hydra.run.dir={out}",
        *extra,
    ]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=folder, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    metrics = json.loads((out / "analysis_results.json").read_text())["results"]["train"]["metrics"]
    callbacks = sum(v for k, v in metrics.items() if k.startswith("seconds_") and k != "seconds_evaluation")
    return {
        "wall": wall,
        "train": metrics["train_seconds"],
        "callbacks": callbacks,
        "evaluation": metrics.get("seconds_evaluation", 0.0),
        "test_accuracy": metrics.get("final_test_accuracy", float("nan")),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows: dict[str, list[dict]] = {"plain": [], "modelxray": [], "modelxray, no callbacks": []}
    with tempfile.TemporaryDirectory(prefix="bench_grokking_") as tmp:
        folder = Path(tmp)
        for i in range(args.repeat):
            rows["plain"].append(run_plain(args.steps, args.eval_every, folder))
            rows["modelxray"].append(run_modelxray(args.steps, args.eval_every, folder, []))
            rows["modelxray, no callbacks"].append(run_modelxray(args.steps, args.eval_every, folder, NO_CALLBACKS))
            print(f"round {i + 1}/{args.repeat}: " + ", ".join(f"{k} {v[-1]['wall']:.1f} s" for k, v in rows.items()))
    med = {k: {m: statistics.median(r[m] for r in v) for m in v[0]} for k, v in rows.items()}
    base = med["plain"]["wall"]
    print(f"\n{args.steps} full-batch steps, evaluation every {args.eval_every}, median of {args.repeat} rounds\n")
    print("| process | wall (s) | x plain | training loop (s) | callbacks (s) | start-up and the rest (s) |")
    print("|---|---|---|---|---|---|")
    for name, m in med.items():
        loop = m["train"] - m.get("callbacks", 0.0)
        rest = m["wall"] - m["train"]
        print(
            f"| {name} | {m['wall']:.1f} | {m['wall'] / base:.2f} | {loop:.1f} | {m.get('callbacks', 0.0):.1f} | {rest:.1f} |"
        )
    print(
        f"\nloop ratio (modelxray training without callbacks / plain training): "
        f"{(med['modelxray, no callbacks']['train']) / med['plain']['train']:.2f}"
    )


if __name__ == "__main__":
    main()
