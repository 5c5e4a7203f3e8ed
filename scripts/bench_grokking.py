"""``python run.py experiment=grokking`` end to end against a plain PyTorch script doing the same
training; every ratio is measured in this one run (rounds alternate, medians reported).

The plain script is what a researcher would write by hand: import torch, build the same modular-
addition split and MLP (one-hot a, b -> 512 ReLU -> p, no bias, seeded), train it full batch with
the same AdamW for the same steps, evaluate train and test accuracy every ``eval_every`` steps and
save the curves as JSON. Both are whole processes (interpreter, imports, data, training, output).

modelxray does more than that: per-example statistics, gradient flow, memorization and feature
snapshots (the experiment's callbacks), the report and its plots, and MLflow logging. Two ratios:

- the training loop: modelxray's loop with the experiment's callbacks as configured against the
  plain loop (each from its first step to its last, evaluations included);
- the whole process: modelxray's wall clock against the plain script's.

Each round notes the machine's load (``os.getloadavg``) before and after. The profile that follows
says where modelxray's extra time goes, from timers put around the run's own functions (the
modelxray processes run through a small wrapper that times them; the timers cost microseconds):
start-up phases (imports, config, MLflow store and run, loading), inside the loop (steps, each
callback's hooks in the loop and before or after it, evaluation, MLflow metric batches), the
callbacks' reports, the report's figures, and MLflow's artifacts. One more modelxray process, not
in the ratios, runs under ``python -X importtime`` and counts what the loop reads back to the host
(``.item()``, ``float()``, ``.cpu()``, ``.numpy()``, ``.tolist()``) to split the imports by package.

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
t0 = time.perf_counter()
import torch
import torch.nn.functional as F
t_import = time.perf_counter() - t0

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
eval_seconds = 0.0


def evaluate(step):
    global eval_seconds
    t = time.perf_counter()
    with torch.no_grad():
        train_acc = (model(x_train).argmax(-1) == y_train).float().mean().item()
        test_acc = (model(x_test).argmax(-1) == y_test).float().mean().item()
    curves.append({"step": step, "train_accuracy": train_acc, "test_accuracy": test_acc})
    if step:
        eval_seconds += time.perf_counter() - t


t_setup = time.perf_counter() - t0 - t_import
evaluate(0)
start = time.perf_counter()
for step in range(1, steps + 1):
    loss = F.cross_entropy(model(x_train), y_train)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if step % eval_every == 0:
        evaluate(step)
train_seconds = time.perf_counter() - start
json.dump(
    {
        "train_seconds": train_seconds,
        "curves": curves,
        "phases": {
            "import torch": t_import,
            "data, model, optimizer": t_setup,
            "evaluation (in the loop)": eval_seconds,
            "in script": time.perf_counter() - t0,
        },
    },
    open(out, "w"),
)
"""

# Runs ``run.py <args>`` with timers around the run's own functions; writes them to $MX_BENCH_PHASES.
# With MX_BENCH_COUNT=1 it also counts the training loop's reads back to the host.
RUNNER = r"""
import contextlib, gc, json, os, sys, time
T0 = time.perf_counter()
from phase_timers import add, exit_code_of, phases, time_attr, timing
counts, collections = {}, {}
sys.argv = ["run.py", *sys.argv[1:]]
gc_start = [0.0]


def gc_timer(phase, info):
    if phase == "start":
        gc_start[0] = time.perf_counter()
    else:
        key = f"garbage collection, generation {info['generation']} (within the phases above)"
        phases[key] = phases.get(key, 0.0) + time.perf_counter() - gc_start[0]
        collections[key] = collections.get(key, 0) + 1


gc.callbacks.append(gc_timer)


t = time.perf_counter()
import modelxray.cli as cli
add("import modelxray.cli (Hydra, OmegaConf)", time.perf_counter() - t)
t = time.perf_counter()
import modelxray.app as app
add("import modelxray.app (torch, numpy)", time.perf_counter() - t)
import modelxray.app.loading as loading
import modelxray.app.orchestration as orch
import modelxray.app.run_tracking as run_tracking
import modelxray.config.components as components
import modelxray.plotting as plotting
import modelxray.report.writer as writer
import modelxray.tracking.mlflow_run as mlflow_run
import modelxray.tracking.mlflow_tracker as mlflow_tracker
import modelxray.training.run as training_run

time_attr(components, "validate_config", "config: components built and checked")
time_attr(mlflow_tracker.MlflowTracker, "check", "MLflow: store checked (imports MLflow)")
time_attr(orch, "_prepare", "config: components built again, run named")
orch.STAGES = tuple((name, timing(fn, f"stage: {name}")) for name, fn in orch.STAGES)
time_attr(loading, "optional_libraries_on_use", "load: transformers' optional modules")
time_attr(mlflow_tracker.MlflowTracker, "start", "start tracking: MLflow run opened")
time_attr(training_run, "train", "train: the loop with its hooks")
time_attr(training_run, "merge_reports", "train: the callbacks' reports")
time_attr(training_run.StepLogger, "flush", "train: MLflow metric batches")
time_attr(writer, "save_result", "report: results JSON")
time_attr(writer, "_draw", "report: figures drawn and saved")
time_attr(mlflow_run.MlflowRun, "log_artifacts", "finish tracking: MLflow artifacts")
orig_style = plotting.style


@contextlib.contextmanager
def style():
    with contextlib.ExitStack() as stack:
        t = time.perf_counter()
        stack.enter_context(orig_style())
        add("report: plot style set (matplotlib, seaborn theme)", time.perf_counter() - t)
        yield


plotting.style = style
callbacks_for = training_run.callbacks_for


def after_the_loop(fn, label):
    def hook(state):  # the epoch end after the last step runs after the loop, as its last measurements
        if state.step < state.max_steps:
            return fn(state)
        t = time.perf_counter()
        try:
            return fn(state)
        finally:
            add(label, time.perf_counter() - t)

    return hook


def timed_callbacks(*args, **kwargs):
    made = callbacks_for(*args, **kwargs)
    for cb in made:  # their hooks before and after the loop: first and last measurements
        label = f"hook outside the loop: {cb.name}"
        cb.on_train_begin = timing(cb.on_train_begin, label)
        cb.on_train_end = timing(cb.on_train_end, label)
        cb.on_epoch_end = after_the_loop(cb.on_epoch_end, label)
    return made


training_run.callbacks_for = timed_callbacks
if os.environ.get("MX_BENCH_COUNT") == "1":
    import torch

    counting = [False]

    def counted(name):
        fn = getattr(torch.Tensor, name)

        def count(self, *args, **kwargs):
            if counting[0]:
                counts[name] = counts.get(name, 0) + 1
            return fn(self, *args, **kwargs)

        setattr(torch.Tensor, name, count)

    for name in ("item", "__float__", "cpu", "numpy", "tolist"):
        counted(name)
    loop_train = training_run.train

    def train(*args, **kwargs):
        counting[0] = True
        try:
            return loop_train(*args, **kwargs)
        finally:
            counting[0] = False

    training_run.train = train
code = 0
try:
    code = exit_code_of(cli.main)
finally:
    phases["in the wrapper"] = time.perf_counter() - T0
    with open(os.environ["MX_BENCH_PHASES"], "w") as f:
        json.dump({"phases": phases, "host_reads": counts, "collections": collections}, f)
cli.exit_promptly(code)  # as python run.py ends
"""

NO_CALLBACKS = [
    *(f"train.learning.{k}.enabled=false" for k in ("examples", "grad_flow", "memorization", "features")),
    *(f"train.dynamics.{k}.enabled=false" for k in ("param_change", "grad", "optim")),
]


def load() -> float:
    return os.getloadavg()[0]


def run_plain(steps: int, eval_every: int, folder: Path) -> dict:
    out = folder / "plain.json"
    before = load()
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", PLAIN, str(steps), str(eval_every), str(out)], check=True)
    wall = time.perf_counter() - t0
    data = json.loads(out.read_text())
    return {
        "wall": wall,
        "train": data["train_seconds"],
        "evaluation": data["phases"]["evaluation (in the loop)"],
        "phases": {**data["phases"], "interpreter start and exit": wall - data["phases"]["in script"]},
        "test_accuracy": data["curves"][-1]["test_accuracy"],
        "load": (before, load()),
    }


def run_modelxray(steps: int, eval_every: int, folder: Path, extra: list[str], profile: bool = False) -> dict:
    out = folder / f"mx{time.time_ns()}"
    phases_file = folder / f"phases{time.time_ns()}.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO / "scripts"), os.environ.get("PYTHONPATH", "")]),
        "MX_BENCH_PHASES": str(phases_file),
        "MX_BENCH_COUNT": "1" if profile else "0",
    }
    cmd = [
        sys.executable,
        *(["-X", "importtime"] if profile else []),
        "-c",
        RUNNER,
        "experiment=grokking",
        f"train.steps={steps}",
        f"train.eval_every={eval_every}",
        "progress=false",
        f"tracker.uri=sqlite:///{folder}/mlflow.db",
        f"hydra.run.dir={out}",
        *extra,
    ]
    before = load()
    t0 = time.perf_counter()
    done = subprocess.run(
        cmd, check=True, env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE if profile else None
    )
    wall = time.perf_counter() - t0
    after = load()
    train = json.loads((out / "analysis_results.json").read_text())["results"]["train"]
    metrics = train["metrics"]
    timers = json.loads(phases_file.read_text())
    phases = {**timers["phases"], "interpreter start and exit": wall - timers["phases"]["in the wrapper"]}
    seconds = {
        k[len("seconds_") :]: v for k, v in metrics.items() if k.startswith("seconds_") and k != "seconds_per_step"
    }
    outside = {k.split(": ", 1)[1]: v for k, v in phases.items() if k.startswith("hook outside the loop: ")}
    in_loop = {k: v - outside.get(k, 0.0) for k, v in seconds.items() if k not in ("evaluation", "checkpoints")}
    evals = len(train["tables"].get("evaluations", []))  # one before the loop and one after it, the rest in it
    row = {
        "wall": wall,
        "train": metrics["train_seconds"],
        "callbacks": sum(in_loop.values()),
        "evaluation": seconds.get("evaluation", 0.0) * max(evals - 2, 0) / max(evals, 1),
        "in_loop": in_loop,
        "outside": outside,
        "phases": phases,
        "steps": metrics["steps"],
        "host_reads": timers["host_reads"],
        "collections": timers["collections"],
        "test_accuracy": metrics.get("after_test_accuracy", float("nan")),
        "load": (before, after),
    }
    if profile:
        row["imports"] = imports_by_package(done.stderr.decode(errors="replace"))
    return row


def imports_by_package(importtime: str) -> dict[str, float]:
    """Seconds of import by top-level package, from ``-X importtime`` (each module's own time, summed)."""
    out: dict[str, float] = {}
    for line in importtime.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _cumulative, name = line.split(":", 1)[1].split("|")
        root = name.strip().split(".")[0]
        out[root] = out.get(root, 0.0) + int(self_us) / 1e6
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def median_of(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def median_dict(rows: list[dict], key: str) -> dict[str, float]:
    names = list(dict.fromkeys(k for r in rows for k in r[key]))
    return {n: statistics.median(r[key].get(n, 0.0) for r in rows) for n in names}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-profile", action="store_true", help="skip the extra profiled modelxray process")
    args = ap.parse_args()
    rows: dict[str, list[dict]] = {"plain": [], "modelxray": [], "modelxray, no callbacks": []}
    start_load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average {start_load[0]:.2f} {start_load[1]:.2f} {start_load[2]:.2f}")
    with tempfile.TemporaryDirectory(prefix="bench_grokking_") as tmp:
        folder = Path(tmp)
        runs = {
            "plain": lambda: run_plain(args.steps, args.eval_every, folder),
            "modelxray": lambda: run_modelxray(args.steps, args.eval_every, folder, []),
            "modelxray, no callbacks": lambda: run_modelxray(args.steps, args.eval_every, folder, NO_CALLBACKS),
        }
        for i in range(args.repeat):
            for name in list(runs) if i % 2 == 0 else list(runs)[::-1]:  # the order alternates between rounds
                rows[name].append(runs[name]())
            p, m = rows["plain"][-1], rows["modelxray"][-1]
            print(
                f"round {i + 1}/{args.repeat}: "
                + ", ".join(
                    f"{k} {v[-1]['wall']:.1f} s (load {v[-1]['load'][0]:.2f}->{v[-1]['load'][1]:.2f})"
                    for k, v in rows.items()
                )
                + f"; loop ratio {m['train'] / p['train']:.2f}, whole ratio {m['wall'] / p['wall']:.2f}",
                flush=True,
            )
        profiled = None if args.no_profile else run_modelxray(args.steps, args.eval_every, folder, [], profile=True)
    end_load = os.getloadavg()
    med = {k: {m: median_of(v, m) for m in ("wall", "train", "evaluation")} for k, v in rows.items()}
    for k in ("modelxray", "modelxray, no callbacks"):
        med[k]["callbacks"] = median_of(rows[k], "callbacks")
    base = med["plain"]
    loop_rounds = [m["train"] / p["train"] for p, m in zip(rows["plain"], rows["modelxray"])]
    whole_rounds = [m["wall"] / p["wall"] for p, m in zip(rows["plain"], rows["modelxray"])]
    loads = [x for v in rows.values() for r in v for x in r["load"]]

    print(f"\n{args.steps} full-batch steps, evaluation every {args.eval_every}, median of {args.repeat} rounds")
    print(
        f"load average (1 min) over the rounds: {min(loads):.2f}-{max(loads):.2f} "
        f"(start {start_load[0]:.2f}, end {end_load[0]:.2f}) on {os.cpu_count()} CPUs\n"
    )
    print(
        "| process | wall (s) | x plain | training loop (s) | x plain loop | in-loop callbacks (s) | evaluation (s) | start-up and the rest (s) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, m in med.items():
        cb = f"{m['callbacks']:.1f}" if "callbacks" in m else ""
        print(
            f"| {name} | {m['wall']:.1f} | {m['wall'] / base['wall']:.2f} | {m['train']:.1f} | "
            f"{m['train'] / base['train']:.2f} | {cb} | {m['evaluation']:.1f} | {m['wall'] - m['train']:.1f} |"
        )
    print(
        f"\ntraining loop, callbacks as configured / plain loop: {statistics.median(loop_rounds):.2f} "
        f"(rounds: {', '.join(f'{r:.2f}' for r in loop_rounds)}; target 1.1)"
    )
    print(
        f"whole process / plain script: {statistics.median(whole_rounds):.2f} "
        f"(rounds: {', '.join(f'{r:.2f}' for r in whole_rounds)}; target 1.2 on an idle machine)"
    )
    print(
        f"training loop without callbacks / plain loop: {med['modelxray, no callbacks']['train'] / base['train']:.2f}"
    )
    print_profile(rows, profiled, args.steps)


SUBPHASES = {  # a stage's own timers, listed under it
    "stage: load": "load: ",
    "stage: start tracking": "start tracking: ",
    "stage: train": "train: ",
    "stage: report": "report: ",
    "stage: finish tracking": "finish tracking: ",
}


def print_profile(rows: dict[str, list[dict]], profiled: dict | None, steps: int) -> None:
    mx, plain = rows["modelxray"], rows["plain"]
    loop = median_of(mx, "train")
    in_loop = median_dict(mx, "in_loop")
    phases = median_dict(mx, "phases")
    flush = phases.get("train: MLflow metric batches", 0.0)
    evaluation = median_of(mx, "evaluation")
    plain_loop, plain_eval = median_of(plain, "train"), median_of(plain, "evaluation")
    print("\nProfile (medians over the rounds). Inside the training loop, modelxray against the plain loop:\n")
    print("| part of the loop | modelxray (s) | plain (s) |")
    print("|---|---|---|")
    steps_only = loop - sum(in_loop.values()) - evaluation - flush
    print(
        f"| optimizer steps (forward, backward, AdamW) and the loop's own work | {steps_only:.2f} | {plain_loop - plain_eval:.2f} |"
    )
    print(f"| evaluation of the train and test splits | {evaluation:.2f} | {plain_eval:.2f} |")
    for name, v in in_loop.items():
        print(f"| callback {name}: its hooks inside the loop | {v:.2f} | |")
    print(f"| MLflow metric batches (the step logger's flushes) | {flush:.2f} | |")
    print(f"| the whole loop | {loop:.2f} | {plain_loop:.2f} |")
    if profiled is not None and profiled["host_reads"]:
        reads = ", ".join(f"{k} {v / steps:.2f}" for k, v in sorted(profiled["host_reads"].items()))
        print(
            f"\nReads back to the host per step in modelxray's loop (the profiled run; on a CPU nothing is copied): {reads}"
        )
    print("\nThe whole modelxray process (a stage's own timers indented under it; imports happen inside the phases):\n")
    print("| phase | seconds |")
    print("|---|---|")
    nested = tuple(SUBPHASES.values()) + ("hook outside", "in the wrapper", "garbage collection", "interpreter")
    outside = median_dict(mx, "outside")
    for name, v in phases.items():
        if name.startswith(nested) or (name.startswith("stage: ") and v < 0.005):
            continue
        print(f"| {name} | {v:.2f} |")
        prefix = SUBPHASES.get(name)
        if prefix:
            for sub, w in phases.items():
                if sub.startswith(prefix):
                    print(f"| &nbsp;&nbsp;{sub} | {w:.2f} |")
            if name == "stage: train":
                for cb, w in outside.items():
                    print(f"| &nbsp;&nbsp;train: {cb}, its hooks before and after the loop | {w:.2f} |")
    print(f"| interpreter start and exit | {phases.get('interpreter start and exit', 0.0):.2f} |")
    counts = median_dict(mx, "collections")
    for name, v in phases.items():
        if name.startswith("garbage collection"):
            print(f"| {name}: {counts.get(name, 0):.0f} collections | {v:.2f} |")
    print("\nThe whole plain script:\n")
    print("| phase | seconds |")
    print("|---|---|")
    pp = median_dict(plain, "phases")
    for name in ("import torch", "data, model, optimizer"):
        print(f"| {name} | {pp[name]:.2f} |")
    print(f"| training loop (evaluation included) | {plain_loop:.2f} |")
    print(
        f"| the rest (first evaluation, curves JSON) | {pp['in script'] - pp['import torch'] - pp['data, model, optimizer'] - plain_loop:.2f} |"
    )
    print(f"| interpreter start and exit | {pp['interpreter start and exit']:.2f} |")
    if profiled is not None:
        top = list(profiled["imports"].items())[:14]
        print(
            "\nImports of the modelxray process by package (python -X importtime, one more run, not in the ratios):\n"
        )
        print(", ".join(f"{k} {v:.2f} s" for k, v in top) + f"; all {sum(profiled['imports'].values()):.2f} s")


if __name__ == "__main__":
    main()
