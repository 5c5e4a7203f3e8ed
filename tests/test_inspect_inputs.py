"""The input the inspect analyzer runs a model on: configured, from the dataset, or read from the
model (a ViT's position embedding and patch convolution), a one-line error naming the key when it
cannot be known (never a guess that fails in the forward), named inputs for models that take
several tensors, and the parameter results kept when the compute part fails."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import mlflow_runs, run_cli
from modelxray.analyzers.inspect import InspectAnalyzer
from modelxray.core.errors import ConfigError
from modelxray.core.result import RunContext
from modelxray.core.subject import ModelInfo, Subject
from modelxray.models.input_inference import infer_input


class GreyCNN(nn.Module):
    """28x28 grey images -> two padded 3x3 convs, each followed by a 2x2 max-pool -> 10 classes."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 8, 3, padding=1)
        self.head = nn.Linear(8 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.head(x.flatten(1))


# 2 x Cout x Hout x Wout x Cin x k x k per conv, 2 x K x N for the linear layer (biases not counted)
CNN_FLOPS = 2 * 4 * 28 * 28 * 1 * 9 + 2 * 8 * 14 * 14 * 4 * 9 + 2 * (8 * 7 * 7) * 10


class TinyViT(nn.Module):
    """A ViT for 224-px images with 16-px patches and width 16: 1 + 14 x 14 position embeddings."""

    def __init__(self, dim: int = 16, patch: int = 16, stride: int = 16, image: int = 224):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=stride)
        n = ((image - patch) // stride + 1) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, 1 + n, dim) * 0.02)
        self.attn = nn.Linear(dim, 3 * dim)  # one single-head attention layer (q, k, v)
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        t = self.patch_embed(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls_token.expand(t.shape[0], -1, -1), t], 1) + self.pos_embed
        q, k, v = self.attn(t).chunk(3, -1)
        t = t + torch.softmax(q @ k.transpose(1, 2) / q.shape[-1] ** 0.5, -1) @ v
        return self.head(t[:, 0])


class TwoTower(nn.Module):
    """CLIP-like: forward(pixel_values, input_ids) -> one similarity per pair."""

    def __init__(self):
        super().__init__()
        self.vision = nn.Conv2d(3, 8, 8, stride=8)  # 32x32 -> 4x4 patches
        self.text = nn.Embedding(50, 8)
        self.proj = nn.Linear(8, 8)

    def forward(self, pixel_values, input_ids):
        v = self.vision(pixel_values).flatten(2).mean(-1)
        t = self.proj(self.text(input_ids).mean(1))
        return (v * t).sum(-1)


TWO_TOWER_FLOPS = 2 * 8 * 4 * 4 * 3 * 8 * 8 + 2 * 8 * 8  # patch conv + projection


class Broken(nn.Module):
    """Parameters that read fine and a forward that raises."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        if x.shape[-1] == 8:
            raise RuntimeError("boom: this model refuses to run")
        return self.fc2(self.fc1(x))


def _subject(model, data=None) -> Subject:
    return Subject(
        model, None, data, ModelInfo(name=type(model).__name__, source_format="test", source_dtype="float32")
    )


def _fast(**kw) -> InspectAnalyzer:
    return InspectAnalyzer(
        **{"energy": False, "profile_iters": 1, "profile_warmup": 0, "peak_matmul_size": 64, "spectral": "none", **kw}
    )


def _run(analyzer, model, tmp_path, data=None):
    subject = _subject(model, data)
    analyzer.preflight(subject)
    return analyzer.run(subject, RunContext(tmp_path, progress=False))


def _traced_cnn():
    torch.manual_seed(0)
    return torch.jit.trace(GreyCNN().eval(), torch.rand(1, 1, 28, 28))


FAST = [
    "analyzer=inspect",
    "analyzer.inspect.energy=false",
    "analyzer.inspect.profile_iters=1",
    "analyzer.inspect.profile_warmup=0",
    "analyzer.inspect.peak_matmul_size=128",
    "analyzer.inspect.spectral=none",
    "dataset.max_tokens=512",
    "progress=false",
    "threads=1",
]


# -- one tensor ---------------------------------------------------------------------------------
@pytest.mark.parametrize("compile_", ["trace", "script"])
def test_a_cnn_file_reveals_its_image_size_and_counts_the_hand_formula(tmp_path, compile_):
    """A traced or scripted CNN records no input size; its own forward runs on 28x28 only (its flatten
    feeds a Linear of 8x7x7), so that is the input, and an explicit shape still wins."""
    torch.manual_seed(0)
    model = torch.jit.trace(GreyCNN(), torch.rand(1, 1, 28, 28)) if compile_ == "trace" else torch.jit.script(GreyCNN())
    _fast().preflight(_subject(model))  # no question asked: the file says it
    result = _run(_fast(), model, tmp_path)
    assert result.data["input"]["shape"] == [1, 1, 28, 28] and result.metrics["flops_total"] == CNN_FLOPS
    assert "the only common image size its forward runs on: 1x28x28" in result.data["input"]["source"]
    nodes = result.tables["nodes"]  # each op by its input shapes, for the compiled file as for an eager model
    (head,) = [n for n in nodes if n["op"] == "aten.addmm"]
    assert head["input_shapes"] == "10 1x392 392x10" and head["flops"] == 2 * 392 * 10 and head["time_s"] > 0
    (conv1,) = [n for n in nodes if n["input_shapes"] == "1x1x28x28 4x1x3x3 4"]
    assert conv1["flops"] == 2 * 4 * 28 * 28 * 1 * 9 and conv1["time_s"] > 0  # the hand formula, timed
    assert sum(n["flops"] for n in nodes) == CNN_FLOPS  # the nodes add up to the forward
    for shape in ([1, 28, 28], [1, 1, 28, 28]):  # without the batch dimension, or a conv model's full shape
        result = _run(_fast(input_shape=shape), model, tmp_path)
        assert result.metrics["flops_total"] == CNN_FLOPS and "compute_error" not in result.data
        assert result.data["input"]["shape"] == [1, 1, 28, 28]
        assert result.data["input"]["source"].startswith("config (analyzer.inspect.input_shape")


@pytest.mark.slow  # a run.py process end to end (the CI runs the slow suite too)
def test_cli_torchscript_cnn_finds_its_input_then_hand_flops(tmp_path, tracking_uri, cache_dir):
    path = tmp_path / "cnn.pt"
    _traced_cnn().save(str(path))
    common = ["model=file", f"model.path={path}", f"dataset.cache_dir={cache_dir}", *FAST]
    track = [f"tracker.uri={tracking_uri}", "tracker.experiment=inspect_ts_cnn"]
    proc = run_cli([*common, *track], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, runs = mlflow_runs(tracking_uri, "inspect_ts_cnn")
    (run,) = [r for r in runs if r.info.status == "FINISHED"]
    assert run.data.metrics["inspect/flops_total"] == CNN_FLOPS
    assert run.data.metrics["inspect/flops_per_sample"] == CNN_FLOPS
    text = next((tmp_path / "outputs").rglob("comprehensive_model_analysis.txt")).read_text()
    # the file is an image classifier of the one size its forward runs on, scored on the digits fitted to it
    assert "Input: the only common image size its forward runs on: 1x28x28" in text
    assert "analysed input   image [1, 1, 28, 28]; from dataset digits" in text


def test_a_torchscript_vit_gets_its_224_px_input_from_the_position_embedding(tmp_path):
    torch.manual_seed(0)
    traced = torch.jit.trace(TinyViT().eval(), torch.rand(1, 3, 224, 224))
    result = _run(_fast(), traced, tmp_path)
    spec = result.data["input"]
    assert spec["shape"] == [1, 3, 224, 224] and spec["kind"] == "image"
    assert "position embedding pos_embed of 197 tokens = 1 + 14x14" in spec["source"]
    assert "patch_embed with kernel 16x16, stride 16x16" in spec["source"]
    assert "compute_error" not in result.data
    conv = next(r for r in result.tables["flops_by_op"] if "convolution" in r["op"])
    assert conv["flops"] == 2 * 16 * 14 * 14 * 3 * 16 * 16  # the patch embedding ran on 224 px
    assert "position embedding" in result.texts["comprehensive_model_analysis.txt"]


def test_overlapping_patches_take_the_stride_from_a_traced_graph():
    traced = torch.jit.trace(TinyViT(patch=16, stride=8, image=64).eval(), torch.rand(1, 3, 64, 64))
    spec = infer_input(traced, batch_size=2, seq_len=None, input_shape=None)
    assert spec["shape"] == [2, 3, 64, 64] and "stride 8x8" in spec["source"] and "assumed" not in spec["source"]


def test_the_order_config_then_dataset_then_model():
    from types import SimpleNamespace

    from modelxray.models.hf_vision import PixelClassifier

    vit = TinyViT()
    assert infer_input(vit, batch_size=1, seq_len=None, input_shape=[3, 32, 32])["shape"] == [1, 3, 32, 32]
    spec = infer_input(vit, batch_size=1, seq_len=None, input_shape=None, data_shape=(3, 96, 96), data_name="d")
    assert spec["shape"] == [1, 3, 96, 96] and spec["source"] == "dataset d (its input_shape)"
    wrapped = PixelClassifier(nn.Linear(4, 4), [0.0], [1.0], (1, 12, 12))
    spec = infer_input(wrapped, batch_size=1, seq_len=None, input_shape=None)
    assert spec["shape"] == [1, 1, 12, 12] and "image_shape" in spec["source"]
    configured = nn.Sequential(nn.Conv2d(2, 4, 3))
    configured.config = SimpleNamespace(image_size=40, num_channels=2)
    spec = infer_input(configured, batch_size=1, seq_len=None, input_shape=None)
    assert spec["shape"] == [1, 2, 40, 40] and "config.image_size" in spec["source"]
    flat = nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 4, 3))  # the digits CNN takes 64 flat pixels
    assert infer_input(flat, batch_size=1, seq_len=None, input_shape=None)["shape"] == [1, 64]


# -- several tensors ----------------------------------------------------------------------------
def test_a_two_input_model_needs_named_inputs(tmp_path):
    traced = torch.jit.trace(TwoTower(), (torch.rand(1, 3, 32, 32), torch.zeros(1, 16, dtype=torch.long)))
    with pytest.raises(ConfigError) as info:
        _fast().preflight(_subject(traced))
    msg = str(info.value)
    assert msg.startswith("analyzer.inspect.inputs: forward takes 2 tensors (pixel_values, input_ids)")
    assert "analyzer.inspect.inputs='{pixel_values:[1,3,224,224],input_ids:[1,16]}'" in msg
    with pytest.raises(ConfigError, match="^analyzer.inspect.inputs: .*input_shape"):
        _fast(input_shape=[3, 32, 32]).preflight(_subject(traced))  # one shape cannot describe two tensors

    # TorchScript: in the declared order, whatever the names
    named = {"image": [1, 3, 32, 32], "text": {"shape": [1, 16], "dtype": "int64"}}
    result = _run(_fast(inputs=named), traced, tmp_path)
    assert result.metrics["flops_total"] == TWO_TOWER_FLOPS and "compute_error" not in result.data
    spec = result.data["input"]
    assert spec["call"] == "positional" and spec["arguments"] == ["pixel_values", "input_ids"]
    assert spec["inputs"]["text"]["high"] == 50  # ids stay below the embedding table
    # an nn.Module: by keyword when the names match forward's, so the order does not matter
    reverse = {"input_ids": [1, 16], "pixel_values": [1, 3, 32, 32]}  # ids: int64 by default
    result = _run(_fast(inputs=reverse), TwoTower(), tmp_path)
    assert result.metrics["flops_total"] == TWO_TOWER_FLOPS and result.data["input"]["call"] == "keyword"
    with pytest.raises(ConfigError, match="^analyzer.inspect.inputs: forward also needs input_ids"):
        _fast(inputs={"pixel_values": [1, 3, 32, 32]}).preflight(_subject(traced))


def test_a_hugging_face_dual_encoder_takes_named_inputs_by_keyword(tmp_path):
    from transformers import CLIPConfig, CLIPModel

    small = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    torch.manual_seed(0)
    clip = CLIPModel(CLIPConfig(text_config=small, vision_config={**small, "image_size": 32, "patch_size": 8}))
    with pytest.raises(ConfigError, match=r"^analyzer.inspect.inputs: the model is a dual encoder"):
        _fast().preflight(_subject(clip.eval()))
    result = _run(_fast(inputs={"input_ids": [1, 8], "pixel_values": [1, 3, 32, 32]}), clip, tmp_path)
    assert "compute_error" not in result.data and result.metrics["flops_total"] > 0
    assert result.data["input"]["call"] == "keyword"

    class ZeroShot(nn.Module):  # wrapped to take pixels only, as model=digits_clip does: one input
        def __init__(self, net):
            super().__init__()
            self.net, self.image_shape = net, (3, 32, 32)

        def forward(self, x):
            return self.net.get_image_features(pixel_values=x)

    spec = infer_input(
        ZeroShot(clip), batch_size=1, seq_len=None, input_shape=None, kind="dual encoder (vision + text)"
    )
    assert spec["shape"] == [1, 3, 32, 32] and "image_shape" in spec["source"]


@pytest.mark.parametrize(
    "bad, key",
    [
        ({"x": [1, 0]}, "inputs.x.shape"),
        ({"x": {"shape": [1, 4], "dtype": "int8"}}, "inputs.x.dtype"),
        ({"x": {"shape": [1, 4], "size": 3}}, "inputs.x.size"),
        ({"x": "1,4"}, "inputs.x"),
    ],
)
def test_bad_named_inputs_are_one_line_errors(bad, key):
    with pytest.raises(ConfigError) as info:
        InspectAnalyzer(inputs=bad)
    assert info.value.key == key and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="^inputs: set input_shape .* or inputs .*not both"):
        InspectAnalyzer(inputs={"x": [1, 4]}, input_shape=[4])


@pytest.mark.slow  # a run.py process end to end (the CI runs the slow suite too)
def test_cli_traced_two_input_model_with_named_inputs(tmp_path, tracking_uri, cache_dir):
    path = tmp_path / "clip_like.pt"
    torch.jit.trace(TwoTower(), (torch.rand(1, 3, 32, 32), torch.zeros(1, 16, dtype=torch.long))).save(str(path))
    proc = run_cli(
        [
            "model=file",
            f"model.path={path}",
            f"dataset.cache_dir={cache_dir}",
            *FAST,
            "analyzer.inspect.inputs={pixel_values:[1,3,32,32],input_ids:{shape:[1,16],dtype:int64}}",
            f"tracker.uri={tracking_uri}",
            "tracker.experiment=inspect_two_inputs",
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, (run,) = mlflow_runs(tracking_uri, "inspect_two_inputs")
    assert run.info.status == "FINISHED" and run.data.metrics["inspect/flops_total"] == TWO_TOWER_FLOPS
    text = next((tmp_path / "outputs").rglob("comprehensive_model_analysis.txt")).read_text()
    assert "pixel_values [1, 3, 32, 32] float32, input_ids [1, 16] int64, passed in this order" in text


# -- partial results ----------------------------------------------------------------------------
def test_a_failing_step_keeps_the_parameters_and_the_steps_before_it(tmp_path, monkeypatch):
    import modelxray.measure.energy as energy

    def no_power(*args, **kwargs):
        raise OSError("no power counters")

    monkeypatch.setattr(energy, "measure_energy", no_power)
    result = _run(_fast(energy=True, input_shape=[1, 28, 28]), _traced_cnn(), tmp_path)
    assert result.ok and result.metrics["flops_total"] == CNN_FLOPS and "forward_ms" in result.metrics
    assert (
        result.data["compute_error"]["step"] == "energy"
        and "no power counters" in result.data["compute_error"]["error"]
    )
    assert "energy_j_per_forward" not in result.metrics and result.metrics["compute_failed"] == 1.0
    text = result.texts["comprehensive_model_analysis.txt"]
    assert "COMPUTE: FAILED" in text and "FLOPs per forward" in text  # the steps before it are reported
    said = result.source.insights(result, {})  # insights.md: the failed step, then what was measured
    assert said[1].startswith("Compute analysis FAILED at step energy (OSError: no power counters) on input ")
    assert said[2].startswith("One forward of ") and result.insights == []


def test_a_forward_that_raises_fails_the_analyzer_and_keeps_its_parameter_report(tmp_path):
    """The model's own forward raising is the analyzer failing (FAILED run, non-zero exit), with
    the parameter results kept; a machine's step failing (energy counters, above) is not."""
    from modelxray.report.writer import write_result

    result = _run(_fast(input_shape=[8]), Broken(), tmp_path)
    assert not result.ok and "forward raised during inspect's FLOPs step" in result.error
    assert result.metrics["parameters"] == 8 * 32 + 32 + 32 * 4 + 4 and result.metrics["compute_failed"] == 1.0
    written = write_result(tmp_path, "inspect", result)
    names = {p.name for p in written.paths}
    assert {"inspect_traceback.txt", "comprehensive_model_analysis.txt"} <= names


@pytest.mark.slow  # several end-to-end runs: `pytest -m slow`
def test_cli_a_model_whose_forward_raises_keeps_its_parameter_report(tmp_path, tracking_uri, cache_dir):
    path = tmp_path / "broken.pt"
    torch.jit.script(Broken()).save(str(path))
    proc = run_cli(
        [
            "model=file",
            f"model.path={path}",
            f"dataset.cache_dir={cache_dir}",
            *FAST,
            f"tracker.uri={tracking_uri}",
            "tracker.experiment=inspect_broken",
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]  # the model's forward raised: the analyzer failed
    _, (run,) = mlflow_runs(tracking_uri, "inspect_broken")
    m = run.data.metrics
    assert run.info.status == "FAILED"  # with its partial results kept
    assert m["inspect/parameters"] == 8 * 32 + 32 + 32 * 4 + 4 and m["inspect/compute_failed"] == 1.0
    assert "inspect/flops_total" not in m
    out = next((tmp_path / "outputs").rglob("comprehensive_model_analysis.txt"))
    text = out.read_text()
    assert "EVERY TENSOR" in text and "fc1.weight" in text
    failed = text.split("COMPUTE: FAILED")[1]
    assert "failed at step   FLOPs" in failed and "boom: this model refuses to run" in failed
    assert "errors/inspect_compute_traceback.txt" in failed
    assert "boom" in (out.parent / "errors" / "inspect_compute_traceback.txt").read_text()
    assert (out.parent / "plots" / "parameter_distributions.png").is_file()
    results = json.loads((out.parent / "analysis_results.json").read_text())["results"]["inspect"]
    assert not results["ok"] and results["data"]["compute_error"]["step"] == "FLOPs"
    # a failed analyzer's insights.md section is its error line: its own sentences are not asked for
    assert results["insights"] == [] and "boom: this model refuses to run" in results["data"]["compute_error"]["error"]
    assert "The inspect analyzer failed: builtins.RuntimeError: boom" in (out.parent / "insights.md").read_text()


def test_the_inputs_suggestion_follows_each_arguments_modality():
    """A speech model's two arguments get audio and mask shapes in the one-line error, not token ids."""
    from modelxray.models.input_inference import infer_input

    class Speech(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(16, 4)

        def forward(self, input_values, attention_mask):
            return self.proj(input_values[..., :16]) * attention_mask[..., :1]

    spec = infer_input(Speech(), batch_size=1, seq_len=None, input_shape=None)
    assert spec["kind"] == "unknown"
    assert "analyzer.inspect.inputs='{input_values:[1,16000],attention_mask:[1,16]}'" in spec["message"]
