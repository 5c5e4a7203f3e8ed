"""``model.device_map``: accelerate places a causal LM's modules over the CPU, GPUs and disk; the run
gives the figures of the model held whole, logs where the modules went, and refuses in one line,
before any weight is read where it can, a map that is wrong or that the run's work cannot use."""

from __future__ import annotations

import pytest
import torch

from modelxray import api
from modelxray.core.errors import ConfigError

SPLIT = {
    "model.embed_tokens": "cpu",
    "model.rotary_emb": "cpu",
    "model.layers.0": "cpu",
    "model.layers.1": "disk",
    "model.layers.2": "disk",
    "model.norm": "cpu",
    "lm_head": "cpu",
}


def _flow(mapping: dict) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in mapping.items()) + "}"


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    path = tmp_path_factory.mktemp("llama") / "m"
    LlamaForCausalLM(config).save_pretrained(path)
    return path


def _run(path, tmp_path, tracking_uri, *more):
    overrides = [
        "model=hf",
        f"model.name_or_path={path}",
        "model.tokenizer=byte",
        "dataset.max_tokens=512",
        "dataset.seq_len=64",
        "analyzer=performance",
        "analyzer.performance.speed_batch_sizes=[1]",
        "analyzer.performance.iters=1",
        "report.dashboard=false",
        "progress=false",
        "tracker=mlflow",
        f"tracker.uri={tracking_uri}",
        "tracker.experiment=device_map",
        *more,
    ]
    return api.analyze(overrides, output_dir=tmp_path / "_".join(m.split("=")[0] for m in more))


def test_blocks_on_disk_give_the_figures_of_the_model_held_whole(llama_dir, tmp_path, tracking_uri):
    from mlflow.tracking import MlflowClient

    placed = _run(llama_dir, tmp_path, tracking_uri, f"model.device_map={_flow(SPLIT)}")
    whole = _run(llama_dir, tmp_path, tracking_uri, "model.device_map=null")
    for key in ("perplexity", "loss", "accuracy"):
        assert placed.metrics[f"performance/{key}"] == pytest.approx(whole.metrics[f"performance/{key}"], rel=1e-6)
    params = MlflowClient(tracking_uri).get_run(placed.run_id).data.params
    assert params["runtime/device_map"] == "cpu: 5 modules, disk: 2 modules"
    assert params["runtime/offload_reason"] == "model.device_map places the model's modules (accelerate)"


def test_auto_on_a_machine_without_a_gpu_holds_the_model_on_the_cpu_and_quantizes(llama_dir, tmp_path, tracking_uri):
    placed = _run(llama_dir, tmp_path, tracking_uri, "model.device_map=auto", "quant=int4")
    whole = _run(llama_dir, tmp_path, tracking_uri, "quant=int4")
    for key in ("perplexity", "kl", "top1_agree"):
        assert placed.metrics[f"performance/{key}"] == pytest.approx(whole.metrics[f"performance/{key}"], rel=1e-6)


@pytest.mark.parametrize(
    "more,message",
    [
        (["model.device_map=everywhere"], r"^model.device_map: must be one of auto, balanced, .* got 'everywhere'$"),
        (["model.device_map={model.layers.1: tape}"], r"^model.device_map.model.layers.1: must be cpu, disk, cuda"),
        (
            ["model.device_map=auto", "model.device=cpu"],
            r"^model.device_map: places the model itself: leave model.device=auto",
        ),
        (
            ["model.device_map=auto", "runtime.offload=blocks"],
            r"^runtime.offload: blocks streams the model itself, and model.device_map places it with accelerate",
        ),
        (
            [f"model.device_map={_flow(SPLIT)}", "quant=int4"],
            r"^model.device_map: offloads model.layers.1, model.layers.2, whose weights are read in at each forward; "
            r"quant= changes the weights: map them to cpu or a GPU, or stream the model with runtime.offload=blocks$",
        ),
        (
            [f"model.device_map={_flow(SPLIT)}", "analyzer=[performance,inspect]"],
            r"^model.device_map: offloads .*, whose weights are read in at each forward; analyzer=inspect reads or "
            r"changes the weights",
        ),
    ],
)
def test_a_map_the_run_cannot_use_is_one_line(more, message, llama_dir, tmp_path, tracking_uri, monkeypatch):
    from transformers import AutoModelForCausalLM

    def never(*args, **kwargs):
        raise AssertionError("the weights were read")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", never)
    with pytest.raises(ConfigError, match=message):
        _run(llama_dir, tmp_path, tracking_uri, *more)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a CUDA GPU")
def test_a_gpu_in_the_map_of_a_machine_without_one_is_one_line(llama_dir, tmp_path, tracking_uri):
    with pytest.raises(
        ConfigError, match=r"^model.device_map.lm_head: puts lm_head on 0, but this machine has no CUDA GPU$"
    ):
        _run(llama_dir, tmp_path, tracking_uri, "model.device_map={lm_head: 0}")
