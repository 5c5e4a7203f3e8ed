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
    (
        "a Hydra callback that runs code",
        "config",
        ["+hydra.callbacks.evil={_target_: torch.load, f: {d}/evil.pt, weights_only: false}"],
    ),
    ("a logging class from a config file", "config", ["--config-dir", "{d}/conf", "experiment=log_handler"]),
    ("job name holding ../", "config", ["hydra.job.name=../../x"]),
    ("tag name MLflow refuses", "config", ["model=tiny_gpt2", "tracker=mlflow", "tracker.tags={../x: 1}"]),
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
    # data files read before the model loads (dataset.check_source); each model is its config.json alone
    (
        "COCO instances.json that is a list",
        "header",
        ["model=hf", "model.name_or_path={d}/detr", "dataset=coco_folder", "dataset.root={d}/coco_list"],
    ),
    (
        "COCO category_id no category has",
        "header",
        ["model=hf", "model.name_or_path={d}/detr", "dataset=coco_folder", "dataset.root={d}/coco_cat"],
    ),
    (
        "COCO box outside its image",
        "header",
        ["model=hf", "model.name_or_path={d}/detr", "dataset=coco_folder", "dataset.root={d}/coco_box"],
    ),
    (
        "mask of another size than its image",
        "header",
        ["model=hf", "model.name_or_path={d}/segformer", "dataset=mask_folder", "dataset.root={d}/segments"],
    ),
    (
        "labelled text: a JSONL line not JSON",
        "header",
        ["model=hf", "model.name_or_path={d}/bert_cls", "dataset=labelled_text", "dataset.path={d}/bad.jsonl"],
    ),
    (
        "labelled text: a CSV without a label column",
        "header",
        ["model=hf", "model.name_or_path={d}/bert_cls", "dataset=labelled_text", "dataset.path={d}/no_label.csv"],
    ),
    (
        "text pairs: a row without a target",
        "header",
        ["model=hf", "model.name_or_path={d}/bart", "dataset=text_pairs", "dataset.path={d}/pairs.jsonl"],
    ),
    (
        "questions naming a missing image",
        "header",
        ["model=hf", "model.name_or_path={d}/llava", "dataset=image_questions", "dataset.path={d}/questions.jsonl"],
    ),
    (
        "audio folder: an MP3 named .wav",
        "header",
        ["model=hf", "model.name_or_path={d}/whisper", "dataset=audio_folder", "dataset.path={d}/clips"],
    ),
    (
        "labelled text for a causal LM",
        "header",
        ["model=hf", "model.name_or_path={d}/gpt2", "dataset=labelled_text", "dataset.path={d}/labels.csv"],
    ),
    # files and folders read before the weights, and the model's own forward once loaded
    ("tokenizer.json that is not JSON", "header", ["model=hf", "model.name_or_path={d}/bad_tokenizer"]),
    ("a safetensors file given as GGUF", "header", ["model=gguf", "model.path={d}/x.safetensors"]),
    (
        "a config.json naming a 1.5 TB model",
        "load",
        ["model=hf", "model.name_or_path={d}/huge", "model.tokenizer=byte"],
    ),
    ("a run folder under a file", "config", ["model=tiny_gpt2", "hydra.run.dir={d}/afile/run"]),
    ("a one-token text", "load", ["model=tiny_gpt2", "dataset=text_files", "dataset.paths=[{d}/one.txt]"]),
    (
        "model inputs of the wrong width",
        "load",
        ["model=file", "model.path={d}/two.pt", "model.inputs={a:[1,16],b:[1,7]}", "analyzer=[performance]"],
    ),
]


def build(d: Path) -> None:
    """The files the cases point at."""
    import torch
    from PIL import Image
    from transformers import GPT2Config, GPT2LMHeadModel

    (d / "conf").mkdir()
    (d / "conf" / "empty.yaml").touch()
    (d / "conf" / "experiment").mkdir()
    (d / "conf" / "experiment" / "log_handler.yaml").write_text(
        '# @package _global_\nhydra:\n  job_logging:\n    handlers:\n      x: {"()": os.system, command: "echo ran"}\n'
    )
    with open(d / "evil.pt", "wb") as f:  # what torch.load(weights_only=False) would run: never loaded
        pickle.dump(Runs(), f)
    (d / "empty.pt").touch()
    torch.save({"w": torch.zeros(2)}, d / "x.pt")
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=257, n_positions=256))
    for name in ("gpt2", "no_model_type", "remote", "pickle_bin", "bad_tokenizer"):
        gpt2.save_pretrained(d / name)
    (d / "bad_tokenizer" / "tokenizer.json").write_text("{not json")
    from safetensors.torch import save_file
    from transformers import LlamaConfig

    save_file({"a": torch.zeros(2)}, str(d / "x.safetensors"))
    LlamaConfig(hidden_size=16384, intermediate_size=53248, num_hidden_layers=100, num_attention_heads=128,
                vocab_size=128000, architectures=["LlamaForCausalLM"]).save_pretrained(d / "huge")  # fmt: skip
    (d / "afile").write_text("")
    (d / "one.txt").write_text("a")

    class TwoInputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fa, self.fb = torch.nn.Linear(16, 8), torch.nn.Linear(8, 8)

        def forward(self, a, b):
            return self.fa(a) + self.fb(b)

    torch.jit.trace(TwoInputs().eval(), (torch.rand(2, 16), torch.rand(2, 8))).save(str(d / "two.pt"))
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
    build_data(d)


# what each data case's model declares in its config.json: enough to know its kind before loading
DECLARED = {
    "detr": ("detr", "DetrForObjectDetection"),
    "segformer": ("segformer", "SegformerForSemanticSegmentation"),
    "bert_cls": ("bert", "BertForSequenceClassification"),
    "bart": ("bart", "BartForConditionalGeneration"),
    "llava": ("llava", "LlavaForConditionalGeneration"),
    "whisper": ("whisper", "WhisperForConditionalGeneration"),
}


def build_data(d: Path) -> None:
    """The broken data files of the data cases, and the config.json of each model they name."""
    from PIL import Image

    for name, (model_type, architecture) in DECLARED.items():
        (d / name).mkdir()
        (d / name / "config.json").write_text(json.dumps({"model_type": model_type, "architectures": [architecture]}))
    image = {"id": 1, "file_name": "0.png", "width": 40, "height": 20}
    box = {"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10]}
    specs = {
        "coco_list": [image],
        "coco_cat": {"images": [image], "categories": [{"id": 1}], "annotations": [{**box, "category_id": 9}]},
        "coco_box": {"images": [image], "categories": [{"id": 1}], "annotations": [{**box, "bbox": [30, 0, 20, 10]}]},
    }
    for name, spec in specs.items():
        (d / name).mkdir()
        Image.new("RGB", (40, 20)).save(d / name / "0.png")
        (d / name / "instances.json").write_text(json.dumps(spec))
    for sub, size in (("images", (20, 20)), ("masks", (20, 10))):
        (d / "segments" / sub).mkdir(parents=True)
        Image.new("L", size).save(d / "segments" / sub / "0.png")
    (d / "bad.jsonl").write_text('{"text": "fine", "label": "pos"}\n{"text": "cut", "label": \n')
    (d / "no_label.csv").write_text("text,lbl\nhello,pos\n")
    (d / "labels.csv").write_text("text,label\nhello,pos\n")
    (d / "pairs.jsonl").write_text('{"source": "a", "target": "b"}\n{"source": "c"}\n')
    (d / "questions.jsonl").write_text('{"image": "nope.png", "prompt": "What is it?", "answer": "a"}\n')
    (d / "clips").mkdir()
    (d / "clips" / "a.wav").write_bytes(b"ID3\x03\x00\x00\x00" + bytes(200))
    (d / "clips" / "transcripts.tsv").write_text("a.wav\thello\n")


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
    parser.add_argument("--only", default="", help="run the cases whose name holds this text")
    ns = parser.parse_args()
    cases = [c for c in CASES if ns.only in c[0]]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        build(d)
        print("| bad input | check | exit | error lines | seconds | target |\n|---|---|---|---|---|---|")
        for name, kind, args in cases:
            runs = [run_case(args, d) for _ in range(ns.repeat)]
            code, lines, _, message = runs[-1]
            seconds = statistics.median(r[2] for r in runs)
            target = {"config": CONFIG_S, "header": HEADER_S}.get(kind)
            ok = code == 2 and lines == 1 and (target is None or seconds < target)
            failed += not ok
            print(f"| {name} | {kind} | {code} | {lines} | {seconds:.1f} | {f'< {target:g} s' if target else '-'} |")
            if not ok:
                print(f"    {message[:300]}", file=sys.stderr)
    print(f"\n{len(cases) - failed} of {len(cases)} cases: one line, exit 2, within the target", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
