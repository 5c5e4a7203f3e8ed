"""Bad input that used to escape the one-line rule (a traceback, minutes of retries, Hydra's
multi-line message): each now ends with ``modelxray: error: <key or file>: <fix>`` and exit code 2."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

ARCH = "model.architecture={model_type: gpt2, n_layer: 1, n_embd: 64, n_head: 4, vocab_size: 257}"
# Loaded into every run.py process _cli starts (as sitecustomize): counts the process's time.sleep
# calls and writes their durations to $MODELXRAY_TEST_SLEEPS at exit. MLflow's SQLite retries,
# urllib3's and huggingface_hub's request retries all wait with time.sleep between tries, so "no
# retry loop ran" is "no sleep", observed without timing anything (durations: scripts/bench_startup.py).
SLEEP_COUNTER = """
import atexit, os, time
_sleep, _slept = time.sleep, []
def _counted(seconds):
    _slept.append(seconds)
    _sleep(seconds)
time.sleep = _counted
@atexit.register
def _report():
    with open(os.environ["MODELXRAY_TEST_SLEEPS"], "w") as f:
        f.write("\\n".join(repr(s) for s in _slept))
"""
RETRY_WORDS = ("retr", "backoff", "Max retries")  # what MLflow, urllib3 and huggingface_hub log when retrying


def _cli(args: list[str], cwd: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[float]]:
    """``python run.py ...`` in ``cwd``; the process and the seconds of each time.sleep it made."""
    probe = cwd / ".sleep_counter"
    probe.mkdir(exist_ok=True)
    (probe / "sitecustomize.py").write_text(SLEEP_COUNTER)
    slept = probe / "slept.txt"
    slept.unlink(missing_ok=True)
    path = os.pathsep.join(filter(None, [str(probe), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, str(REPO / "run.py"), "threads=1", f"hydra.run.dir={cwd}/out", *args],
        cwd=cwd,
        env={**os.environ, "HYDRA_FULL_ERROR": "0", "PYTHONPATH": path, "MODELXRAY_TEST_SLEEPS": str(slept), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert slept.exists(), "the sleep counter did not run in the process: " + proc.stderr[-2000:]
    text = slept.read_text()
    return proc, [float(s) for s in text.splitlines()] if text else []


def _no_retries(proc: subprocess.CompletedProcess, sleeps: list[float], cwd: Path) -> None:
    """No retry loop ran: the process never slept, and neither its output nor its log mentions a retry."""
    assert sleeps == [], f"the process slept {sleeps} s: a retry loop ran\n{proc.stderr[-3000:]}"
    logs = "".join(p.read_text(errors="replace") for p in (cwd / "out").rglob("*.log"))
    text = (proc.stdout + proc.stderr + logs).lower()
    assert not any(w.lower() in text for w in RETRY_WORDS), (proc.stderr + logs)[-3000:]


def _error(proc: subprocess.CompletedProcess) -> str:
    """The one error line, checked: exit code 2, no traceback, the last line of stderr."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Could not override" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("modelxray: error: "), proc.stderr[-3000:]
    return last.removeprefix("modelxray: error: ")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- 1. model=file: an empty file, a directory without config.json, weights of another shape


def test_empty_checkpoint_file(tmp_path):
    (tmp_path / "empty.pt").touch()
    proc, _ = _cli(["model=file", "model.path=empty.pt", ARCH, "tracker=none"], tmp_path)
    assert _error(proc) == (
        "model.path: model file 'empty.pt' is empty (0 bytes): save or copy the checkpoint again and point model.path at it"
    )
    assert not (tmp_path / "out" / "errors").exists()  # refused before the run started


def test_directory_without_config_json(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "weights.bin").write_bytes(b"x")
    proc, _ = _cli(["model=file", "model.path=ckpt", "tracker=none"], tmp_path)
    msg = _error(proc)
    assert msg.startswith("model.path: directory 'ckpt' has no config.json") and "save_pretrained" in msg
    proc, _ = _cli(["model=hf", "model.name_or_path=./ckpt", "tracker=none"], tmp_path)
    assert _error(proc).startswith("model.name_or_path: directory 'ckpt' has no config.json")


def test_state_dict_of_another_shape(tmp_path):
    import torch

    torch.save({"transformer.wte.weight": torch.zeros(10, 4)}, tmp_path / "other.pt")
    proc, _ = _cli(["model=file", "model.path=other.pt", ARCH, "tracker=none"], tmp_path)
    assert _error(proc) == (
        "other.pt: does not fit model.architecture: transformer.wte.weight is [10, 4] in the file and [257, 64] "
        "in the model (1 of 1 tensors differ); set model.architecture to the configuration the weights were saved with"
    )


# --- 2. dataset=text_files: no text, only directories, one token; a short text is one shorter window


@pytest.mark.parametrize(
    "make,pattern,expected",
    [
        (lambda d: (d / "e.txt").touch(), "e.txt", "dataset.paths: the text of 'e.txt' is empty (0 bytes); "),
        (lambda d: (d / "dir.txt").mkdir(), "dir*", "dataset.paths: 'dir*' matches only directories (dir.txt); "),
    ],
)
def test_text_files_with_no_text_fail_before_the_model_loads(tmp_path, make, pattern, expected):
    make(tmp_path)
    proc, _ = _cli(["model=tiny_gpt2", "dataset=text_files", f"dataset.paths=[{pattern}]", "tracker=none"], tmp_path)
    assert _error(proc).startswith(expected)
    assert not (tmp_path / "out" / "errors").exists()  # refused before the run started


def test_text_of_one_token(tmp_path, cache_dir):
    (tmp_path / "one.txt").write_text("a")
    args = ["debug=tiny", "dataset=text_files", "dataset.paths=[one.txt]", f"dataset.cache_dir={cache_dir}"]
    proc, _ = _cli(args, tmp_path)
    assert _error(proc) == (
        "dataset.paths: the text of 'one.txt' is 1 token(s) long; a text dataset needs at least 2 tokens "
        "(one input and one target): give more text"
    )
    assert not (tmp_path / "out" / "analysis_results.json").exists()  # no analyzer ran


@pytest.mark.slow  # a run.py process end to end (the in-process tests cover the numbers)
def test_text_shorter_than_one_window_is_one_shorter_window(tmp_path, cache_dir):
    from modelxray.data.text_files import TextFiles
    from modelxray.models.tokenizers import load_tokenizer

    (tmp_path / "short.txt").write_text("forty bytes of text, scored all the same")
    data = TextFiles(paths=[str(tmp_path / "short.txt")], seq_len=128, cache_dir=cache_dir).load(load_tokenizer("byte"))
    assert (data.n_tokens, data.seq_len) == (40, 40)
    assert data.note == "the text is 40 tokens, shorter than dataset.seq_len=128: one window of 40"
    proc, _ = _cli(
        ["debug=tiny", "dataset=text_files", "dataset.paths=[short.txt]", f"dataset.cache_dir={cache_dir}"]
        + ["analyzer.performance.iters=1", "analyzer.performance.layer_timing_iters=1", "report.dashboard=false"],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (tmp_path / "out" / "summary_report.md").read_text()
    assert "windows of 40 (the text is 40 tokens, shorter than dataset.seq_len=128: one window of 40)" in report


# --- 3. a tracking store that cannot work: one line at once, no retry loop (its minutes of waits are
# what made these slow; scripts/bench_startup.py times them)


def test_unwritable_sqlite_folder(tmp_path):
    proc, sleeps = _cli(["model=tiny_gpt2", "tracker=mlflow", "tracker.uri=sqlite:////proc/mlflow.db"], tmp_path)
    assert _error(proc).startswith("tracker.uri: the folder of the SQLite file '/proc/mlflow.db' is not writable (")
    assert len(proc.stderr.strip().splitlines()) == 1  # the error line alone: no retry warnings before it
    _no_retries(proc, sleeps, tmp_path)
    assert not (tmp_path / "out" / "errors").exists()  # refused before the run started


def test_a_sweep_on_an_unwritable_store_stops_once_before_any_job(tmp_path):
    args = ["-m", "model=tiny_gpt2", "quant=none,int8", "tracker=mlflow", "tracker.uri=sqlite:////proc/mlflow.db"]
    proc, sleeps = _cli([*args, f"hydra.sweep.dir={tmp_path}/sweep"], tmp_path)
    assert _error(proc).startswith("tracker.uri: the folder of the SQLite file '/proc/mlflow.db' is not writable (")
    assert proc.stderr.count("modelxray: error:") == 1 and "#0" not in proc.stdout  # no job was launched
    _no_retries(proc, sleeps, tmp_path)


def test_no_tracking_server_listening(tmp_path):
    port = _free_port()
    proc, sleeps = _cli(["model=tiny_gpt2", "tracker=mlflow_server", f"tracker.uri=http://127.0.0.1:{port}"], tmp_path)
    assert _error(proc).startswith(f"tracker.uri: no MLflow server answers at http://127.0.0.1:{port} (")
    assert len(proc.stderr.strip().splitlines()) == 1  # the error line alone: no retry warnings before it
    _no_retries(proc, sleeps, tmp_path)  # the probe's one request; MLflow's client, which retries, never ran
    assert not (tmp_path / "out" / "errors").exists()


# --- 4. a hub id, not cached, on a machine that is offline


def test_hub_model_offline_mode(tmp_path):
    proc, sleeps = _cli(
        ["model=hf", "model.name_or_path=someone/some-model", "tracker=none"],
        tmp_path,
        HF_HUB_OFFLINE="1",
        HF_HOME=str(tmp_path / "hf"),
    )
    assert _error(proc) == (
        "model.name_or_path: 'someone/some-model' is not in the local Hugging Face cache and the machine is offline "
        "(HF_HUB_OFFLINE is set); pass a local model directory (model.name_or_path=/path/to/model) or download it "
        "while online"
    )
    _no_retries(proc, sleeps, tmp_path)


def test_hub_model_endpoint_unreachable(tmp_path):
    endpoint = f"http://127.0.0.1:{_free_port()}"
    proc, sleeps = _cli(
        ["model=hf", "model.name_or_path=someone/some-model", "tracker=none"],
        tmp_path,
        HF_HUB_OFFLINE="0",
        HF_ENDPOINT=endpoint,
        HF_HOME=str(tmp_path / "hf"),
    )
    msg = _error(proc)
    assert msg.startswith(
        f"model.name_or_path: 'someone/some-model' is not in the local Hugging Face cache and the machine is offline ({endpoint}: "
    )
    assert "pass a local model directory" in msg
    _no_retries(proc, sleeps, tmp_path)  # the endpoint was probed once, not retried by huggingface_hub


@pytest.mark.slow
def test_cached_hub_model_loads_at_once_when_the_hub_does_not_answer(tmp_path):
    """transformers would ask the dead endpoint for newer files, retrying for about a minute, before
    it fell back to the cache; the probe sees the endpoint is down and the cache alone is used."""
    from transformers import GPT2Config, GPT2LMHeadModel

    repo = tmp_path / "hf" / "hub" / "models--acme--tiny"
    snapshot = repo / "snapshots" / ("0" * 40)
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=257, n_positions=128)).save_pretrained(
        snapshot
    )
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(snapshot.name)
    endpoint = f"http://127.0.0.1:{_free_port()}"
    args = ["model=hf", "model.name_or_path=acme/tiny", "model.tokenizer=byte", "debug=few_tokens", "tracker=none"]
    args += ["dataset.seq_len=64", "analyzer.performance.iters=1", "analyzer.performance.layer_timing=false"]
    proc, sleeps = _cli(args, tmp_path, HF_HUB_OFFLINE="0", HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "hf"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (tmp_path / "out" / "summary_report.md").read_text()
    assert f"loaded from the local Hugging Face cache: the machine is offline ({endpoint}" in report
    _no_retries(proc, sleeps, tmp_path)  # the endpoint's retries took about a minute


# --- 5. a key without + that does not exist, or belongs to another option


@pytest.mark.parametrize(
    "override,expected",
    [
        ("foo=1", "foo: unknown top-level key; valid keys: analyzer, dataset, model, "),
        ("quant.bits=1", "quant.bits: unknown key for NoQuant"),  # quant=none has no keys
        ("dataset.seq_lenx=64", "dataset.seq_lenx: unknown key for PydocTopics; valid keys: cache_dir, "),
    ],
)
def test_unknown_key_without_plus(tmp_path, override, expected):
    proc, _ = _cli(["model=tiny_gpt2", override, "tracker=none"], tmp_path)
    assert _error(proc).startswith(expected)
    assert len(proc.stderr.strip().splitlines()) == 1


def test_plain_overrides_of_existing_keys_and_group_choices_still_compose(tmp_path):
    proc, _ = _cli(["model=tiny_gpt2", "quant=int4", "quant.bits=3", "dataset.seq_len=64", "--cfg", "job"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "bits: 3" in proc.stdout and "seq_len: 64" in proc.stdout


# --- 6. what Hydra would answer in many lines (exit 1): a group option that does not exist, an empty
# value, several values without -m, a value its grammar cannot read


@pytest.mark.parametrize(
    "args,expected",
    [
        (["model=nope"], "model: no option 'nope'; choose one of: digits_clip, "),
        (["analyzer=[performance,nope]"], "analyzer: no option 'nope'; choose one of: bitwidth, inspect, "),
        (["-m", "quant="], "quant: no option given; choose one of: awq_int3, "),
        (["-m", "quant=int8,nope"], "quant: no option 'nope'; choose one of: awq_int3, "),
        (["debug=tiny,few_tokens"], "debug: 'tiny,few_tokens' is several values: add -m to run one job per value"),
        (["model=file", "model.path=/data/é.pt"], "model.path: the value '/data/é.pt' cannot be read as written ("),
        (["model=file", "model.path=/data/(1).pt"], "model.path: the value '/data/(1).pt' cannot be read as written"),
    ],
)
def test_what_hydra_answers_in_many_lines_is_one_line(tmp_path, args, expected):
    proc, _ = _cli(["tracker=none", *args], tmp_path)
    assert _error(proc).startswith(expected)
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "multirun").exists()


def test_a_quoted_value_with_other_characters_reaches_the_key(tmp_path):
    proc, _ = _cli(["model=file", "model.path='/data/é (1).pt'", "--cfg", "job"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "path: /data/é (1).pt" in proc.stdout


# --- 7. files transformers, Pillow or MLflow would answer with a traceback


def _hf_dir(path: Path, **config_changes) -> Path:
    import json

    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=257, n_positions=64)).save_pretrained(path)
    config = json.loads((path / "config.json").read_text())
    for key, value in config_changes.items():
        if value is None:
            config.pop(key)
        else:
            config[key] = value
    (path / "config.json").write_text(json.dumps(config))
    return path


HF_RUN = ["debug=few_tokens", "model.tokenizer=byte", "dataset.seq_len=32", "analyzer=[performance]"]


def test_a_config_json_without_model_type_or_not_json(tmp_path):
    _hf_dir(tmp_path / "m", model_type=None)
    proc, _ = _cli(["model=hf", "model.name_or_path=./m", "tracker=none", *HF_RUN], tmp_path)
    assert _error(proc) == (
        "model.name_or_path: 'm/config.json' has no model_type, so transformers cannot tell which "
        'architecture to build; add one (e.g. "model_type": "llama") or save the model again with save_pretrained'
    )
    (tmp_path / "m" / "config.json").write_text("{not json")
    proc, _ = _cli(["model=file", "model.path=m", "tracker=none", *HF_RUN], tmp_path)
    assert _error(proc).startswith("model.path: 'm/config.json' cannot be read as JSON (")


def test_model_code_and_a_pickle_checkpoint_are_refused_in_one_line_and_leave_no_run(tmp_path):
    """Refused by transformers while loading: one line, exit 2, and no FAILED run in the store."""
    import pickle

    import torch

    _hf_dir(tmp_path / "remote", model_type="acme_net", auto_map={"AutoConfig": "configuration_acme.AcmeConfig"})
    evil = _hf_dir(tmp_path / "evil")
    (evil / "model.safetensors").unlink()

    class RunsCode:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path}/ran",))

    with open(evil / "pytorch_model.bin", "wb") as f:
        pickle.dump({"transformer.wte.weight": RunsCode()}, f)
    store = ["tracker=mlflow", f"tracker.uri=sqlite:///{tmp_path}/runs.db"]
    proc, _ = _cli(["model=hf", "model.name_or_path=./remote", *HF_RUN, *store], tmp_path)
    assert _error(proc) == (
        "model.trust_remote_code: './remote' ships its own model code, which runs on this machine when loaded; "
        "read it, and set model.trust_remote_code=true if you trust it"
    )
    proc, _ = _cli(["model=hf", "model.name_or_path=./evil", *HF_RUN, *store], tmp_path)
    assert _error(proc).startswith("model.name_or_path: a .bin checkpoint in './evil' holds Python objects beyond")
    assert not (tmp_path / "ran").exists()
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/runs.db")
    experiments = client.search_experiments()
    assert not client.search_runs([e.experiment_id for e in experiments]) if experiments else True
    assert torch.load  # the refusal came from transformers' weights_only load, not from a missing torch


def test_a_tracking_uri_mlflow_cannot_store_runs_at(tmp_path):
    proc, _ = _cli(["model=tiny_gpt2", "tracker.uri=ftp://host/runs"], tmp_path)
    assert _error(proc).startswith("tracker.uri: MLflow keeps no runs at a ftp:// address; use sqlite:///mlflow.db")


def _image(path: Path, colour: str = "red") -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (32, 32), colour).save(path)
    return path


@pytest.mark.parametrize("bad", ["not_an_image", "truncated"])
def test_image_files_that_are_no_images(tmp_path, bad):
    for cls, colour in (("a", "red"), ("b", "blue")):
        _image(tmp_path / "imgs" / cls / "0.png", colour)
    target = tmp_path / "imgs" / "b" / "1.png"
    if bad == "not_an_image":
        target.write_text("a text file named .png")
        why = "not an image file Pillow can read"
    else:
        data = (tmp_path / "imgs" / "a" / "0.png").read_bytes()
        target.write_bytes(data[: len(data) // 2])
        why = "OSError: Truncated File Read"
    args = ["model=digits_mlp", "dataset=image_folder", "dataset.root=imgs", "tracker=none"]
    proc, _ = _cli(args, tmp_path)
    assert _error(proc) == (
        f"dataset.root: 'imgs/b/1.png' is no readable image ({why}); remove it or replace it with a good copy"
    )
    assert not (tmp_path / "out" / "errors").exists()  # refused before the run started


def test_weights_with_nan_or_inf_are_named_before_any_analyzer_works(tmp_path):
    """Every quality figure would be nan in a FINISHED run: named in one line instead, unless only an
    analyzer that reports broken weights (inspect) is asked for."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import modelxray
    from modelxray.core.errors import ConfigError
    from modelxray.models.tokenizers import load_tokenizer

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=257, n_positions=64))
    with torch.no_grad():
        model.transformer.h[0].attn.c_attn.weight.fill_(float("nan"))
        model.transformer.wte.weight[3, 0] = float("inf")
    args = ["debug=tiny", "dataset.max_tokens=256", "dataset.seq_len=32", f"dataset.cache_dir={tmp_path}/c"]
    with pytest.raises(ConfigError) as info:
        modelxray.analyze(
            [*args, "analyzer=[performance]"], model=model, tokenizer=load_tokenizer("byte"), output_dir=tmp_path / "a"
        )
    assert str(info.value) == (
        "model: 2 of 16 weight tensors hold NaN or Inf values: transformer.wte.weight (1 of 8,224 values), "
        "transformer.h.0.attn.c_attn.weight (3,072 of 3,072 values); every quality figure would be nan. Check the "
        "checkpoint, or run analyzer=inspect alone to see where they are"
    )
    assert not (tmp_path / "a" / "errors").exists()
    out = modelxray.analyze(
        [*args, "analyzer=[inspect]", "analyzer.inspect.compute=false"],
        model=model,
        tokenizer=load_tokenizer("byte"),
        output_dir=tmp_path / "b",
    )
    assert not out.failed


def test_empty_config_files(tmp_path):
    """A 0-byte primary config (--config-name) or group option: one line naming it, not
    'seed: expected int, got None' or 'model: is not a chosen option'."""
    (tmp_path / "mine" / "model").mkdir(parents=True)
    (tmp_path / "mine" / "empty.yaml").touch()
    (tmp_path / "mine" / "model" / "blank.yaml").write_text("\n")
    proc, _ = _cli(["--config-dir", "mine", "--config-name", "empty"], tmp_path)
    assert _error(proc).startswith("config: holds none of the keys model, dataset, analyzer, quant, tracker: ")
    proc, _ = _cli(["model=blank", "-cd", "mine", "tracker=none"], tmp_path)  # flags may follow overrides
    assert _error(proc) == "model: option 'blank' is an empty file (mine/model/blank.yaml); fill it or remove it"
    (tmp_path / "mine" / "base.yaml").write_text("defaults:\n  - config\n  - _self_\n\nseed: 7\n")
    proc, _ = _cli(["debug=tiny", "--config-name", "base", "--config-dir", "mine", "--cfg", "job"], tmp_path)
    assert proc.returncode == 0 and "\nseed: 7\n" in "\n" + proc.stdout, proc.stderr[-2000:]


# --- 8. mismatches the model's own config shows: found before any weight is read


def test_a_dataset_of_another_kind_or_longer_than_the_positions_is_found_before_loading(tmp_path, monkeypatch):
    import modelxray.models.hf as hf

    _hf_dir(tmp_path / "m")  # a GPT-2 with 64 learned positions
    monkeypatch.setattr(hf.HFSource, "load", lambda self: pytest.fail("the model was loaded"))
    import modelxray
    from modelxray.core.errors import ConfigError

    base = ["model=hf", f"model.name_or_path={tmp_path}/m", "model.tokenizer=byte", "tracker=none"]
    with pytest.raises(ConfigError) as info:
        modelxray.analyze([*base, "dataset.seq_len=128"], output_dir=tmp_path / "a")
    assert str(info.value) == (
        f"dataset.seq_len: 128 tokens do not fit the model's 64 learned positions ({tmp_path}/m/config.json); "
        "use dataset.seq_len=64 or less"
    )
    with pytest.raises(ConfigError) as info:
        modelxray.analyze([*base, "dataset=digits"], output_dir=tmp_path / "b")
    assert str(info.value).startswith(
        f"dataset: digits holds images, and the model is of kind causal_lm ({tmp_path}/m/config.json), which needs "
        "text; use a text dataset (pydoc_topics, "
    )
    with pytest.raises(ConfigError) as info:
        modelxray.analyze(["model=digits_mlp", "dataset=pydoc_topics", "tracker=none"], output_dir=tmp_path / "c")
    assert str(info.value).startswith(
        "dataset: pydoc_topics holds text, and the model is of kind image_classification,"
    )
    assert not any((tmp_path / d / "errors").exists() for d in "abc")


def test_rotary_or_relative_positions_set_no_limit():
    from modelxray.models.hf_dir import learned_positions

    assert learned_positions({"n_positions": 64}) == 64
    assert learned_positions({"max_position_embeddings": 512, "position_embedding_type": "absolute"}) == 512
    assert learned_positions({"max_position_embeddings": 8192, "rope_theta": 1e4}) is None
    assert learned_positions({"max_position_embeddings": 512, "position_embedding_type": "relative_key"}) is None
    assert learned_positions({"text_config": {"n_positions": 32}, "vision_config": {}}) == 32


def test_the_byte_tokenizer_for_an_encoder_is_one_line(tmp_path):
    from transformers import BertConfig, BertForMaskedLM

    BertForMaskedLM(
        BertConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64, vocab_size=300)
    ).save_pretrained(tmp_path / "bert")
    proc, _ = _cli(["model=hf", "model.name_or_path=./bert", "model.tokenizer=byte", "tracker=none"], tmp_path)
    assert _error(proc).startswith("model.tokenizer: the byte tokenizer serves causal LMs and dual encoders only;")


def test_what_hydra_or_omegaconf_raise_while_composing_is_one_line(tmp_path):
    """The net under every check above: any error Hydra or OmegaConf raise while composing (a group
    the primary config's defaults lack, an interpolation that does not resolve, an import error of
    several lines) is one line, exit 2."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "bare.yaml").write_text("seed: 1\n")
    proc, _ = _cli(["--config-dir", "mine", "--config-name", "bare", "quant=int8"], tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "modelxray: error: Could not override 'quant'. No match in the defaults list. To append to your default "
        "list use +quant=int8"
    )
    proc, _ = _cli(["model=tiny_gpt2", "tracker=none", "model.n_layer=${oops}"], tmp_path)
    assert _error(proc) == "Interpolation key 'oops' not found" and len(proc.stderr.strip().splitlines()) == 1
    proc, _ = _cli(["model=tiny_gpt2", "tracker=none", "+analyzer.x._target_=no_such_module.X"], tmp_path)
    assert _error(proc).startswith("analyzer.x._target_: cannot import 'no_such_module.X': ")


def test_what_a_model_option_declares_before_loading(tmp_path):
    """The kind the pre-load check uses is the one the load would use: a generic HF directory (given
    inputs) is generic, whatever its config's architecture says."""
    from modelxray.models.file import FileSource
    from modelxray.models.hf import HFSource

    path = _hf_dir(tmp_path / "m")
    assert HFSource(name_or_path=str(path)).declared().kind.name == "causal_lm"
    assert HFSource(name_or_path=str(path), kind="masked_lm").declared().kind.name == "masked_lm"
    assert FileSource(path=str(path)).declared().max_positions == 64
    assert FileSource(path=str(path), inputs={"input_ids": [1, 8]}).declared().kind.name == "generic"
