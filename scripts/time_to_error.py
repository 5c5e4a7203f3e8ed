"""Benchmark: how long ``python run.py`` takes to refuse bad input, and that each refusal is one line
with exit code 2.

    python scripts/time_to_error.py              # every case, a Markdown table on stdout
    python scripts/time_to_error.py --repeat 3   # the median of three runs per case

Builds what the cases need in a temporary folder (tiny Hugging Face model directories, image folders,
empty files) and runs each command as a user would type it. Targets on a quiet machine: under 2 s for
a config error (nothing but the config is read), under 5 s for an error found in a file's header
(config.json, image headers; torch and transformers are imported first). docs/reliability.md
lists the cases with the figures of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CONFIG_S, HEADER_S = 2.0, 5.0  # targets: config errors, file-header checks

# (case, kind of check, arguments); {d} is the fixtures folder
CASES = [
    ("unknown group option", "config", ["model=nope"]),
    ("unknown option in a list", "config", ["analyzer=[performance,nope]"]),
    ("empty sweep value", "config", ["-m", "quant="]),
    ("sweep with no value", "config", ["-m", "seed=range(0,0)"]),
    ("several values without -m", "config", ["debug=tiny,few_tokens"]),
    ("non-ASCII value unquoted", "config", ["model=file", "model.path=/data/é.pt"]),
    ("unknown key", "config", ["model=tiny_gpt2", "foo=1"]),
    ("negative timeout", "config", ["model=tiny_gpt2", "tracker.sqlite_timeout_s=-1"]),
    ("tracking URI of no store", "config", ["model=tiny_gpt2", "tracker=mlflow", "tracker.uri=ftp://host/runs"]),
    ("country codecarbon does not know", "config", ["analyzer=[inspect]", "analyzer.inspect.country_iso_code=XYZ"]),
    ("empty primary config", "config", ["--config-dir", "{d}/conf", "--config-name", "empty"]),
    (
        "a group its primary config lacks",
        "config",
        ["--config-dir", "{d}/conf", "--config-name", "empty", "quant=int8"],
    ),
    ("interpolation that does not resolve", "config", ["model=tiny_gpt2", "model.n_layer=${oops}"]),
    (
        "_target_ that runs code",
        "config",
        ["model=file", "model.path={d}/x.pt", "model.architecture={_target_: os.system}"],
    ),
    ("empty checkpoint file", "header", ["model=file", "model.path={d}/empty.pt"]),
    ("config.json without model_type", "header", ["model=hf", "model.name_or_path={d}/no_model_type"]),
    (
        "image folder with a non-image",
        "header",
        ["model=digits_mlp", "dataset=image_folder", "dataset.root={d}/images"],
    ),
    ("seq_len beyond learned positions", "header", ["model=hf", "model.name_or_path={d}/gpt2", "dataset.seq_len=512"]),
    ("dataset of another kind", "header", ["model=hf", "model.name_or_path={d}/gpt2", "dataset=digits"]),
    ("model shipping its own code", "header", ["model=hf", "model.name_or_path={d}/remote"]),
    ("pickle .bin checkpoint", "load", ["model=hf", "model.name_or_path={d}/pickle_bin", "analyzer=[performance]"]),
]


def build(d: Path) -> None:
    """The files the cases point at."""
    import torch
    from PIL import Image
    from transformers import GPT2Config, GPT2LMHeadModel

    (d / "conf").mkdir()
    (d / "conf" / "empty.yaml").touch()
    (d / "empty.pt").touch()
    torch.save({"w": torch.zeros(2)}, d / "x.pt")
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=257, n_positions=256))
    for name in ("gpt2", "no_model_type", "remote", "pickle_bin"):
        gpt2.save_pretrained(d / name)
    config = json.loads((d / "no_model_type" / "config.json").read_text())
    config.pop("model_type")
    (d / "no_model_type" / "config.json").write_text(json.dumps(config))
    config = json.loads((d / "remote" / "config.json").read_text())
    config.update(model_type="acme_net", auto_map={"AutoConfig": "configuration_acme.AcmeConfig"})
    (d / "remote" / "config.json").write_text(json.dumps(config))
    (d / "pickle_bin" / "model.safetensors").unlink()
    with open(d / "pickle_bin" / "pytorch_model.bin", "wb") as f:
        pickle.dump({"transformer.wte.weight": Runs()}, f)
    for cls in ("a", "b"):
        (d / "images" / cls).mkdir(parents=True)
        Image.new("RGB", (32, 32), "red").save(d / "images" / cls / "0.png")
    (d / "images" / "b" / "1.png").write_text("a text file named .png")


class Runs:
    """A pickled object that would run a command when unpickled (it never is)."""

    def __reduce__(self):
        return (os.system, ("echo this should never run",))


def run_case(args: list[str], d: Path) -> tuple[int, int, float, str]:
    args = [a.replace("{d}", str(d)) for a in args]
    if "model=hf" in args:  # a tiny directory model, with the byte tokenizer
        args += ["model.tokenizer=byte"]
    own_tracker = any(a.startswith("tracker") for a in args) or "--config-name" in args  # else: untracked
    cmd = [sys.executable, str(REPO / "run.py"), *([] if own_tracker else ["tracker=none"])]
    start = time.perf_counter()
    proc = subprocess.run(
        [*cmd, *args, "hydra.run.dir=" + str(d / "out")], capture_output=True, text=True, cwd=d, timeout=600
    )
    seconds = time.perf_counter() - start
    errors = [line for line in proc.stderr.splitlines() if line.startswith("modelxray: error:")]
    tracebacks = proc.stderr.count("Traceback")
    return proc.returncode, len(errors) + tracebacks, seconds, (errors or proc.stderr.splitlines() or [""])[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs per case; the median is printed")
    ns = parser.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        build(d)
        print("| bad input | check | exit | error lines | seconds | target |\n|---|---|---|---|---|---|")
        for name, kind, args in CASES:
            runs = [run_case(args, d) for _ in range(ns.repeat)]
            code, lines, _, message = runs[-1]
            seconds = statistics.median(r[2] for r in runs)
            target = {"config": CONFIG_S, "header": HEADER_S}.get(kind)
            ok = code == 2 and lines == 1 and (target is None or seconds < target)
            failed += not ok
            print(f"| {name} | {kind} | {code} | {lines} | {seconds:.1f} | {f'< {target:g} s' if target else '-'} |")
            if not ok:
                print(f"    {message[:300]}", file=sys.stderr)
    print(f"\n{len(CASES) - failed} of {len(CASES)} cases: one line, exit 2, within the target", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
