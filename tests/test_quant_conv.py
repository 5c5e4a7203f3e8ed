"""Quantizing convolutions (kind ``conv``), the towers of CLIP-style dual encoders in bit plans, and
the error of a quantizer that matches no module (e.g. a TorchScript model)."""

import copy
import importlib.util

import pytest
import torch
from torch import nn

import modelxray
from modelxray.core.errors import ConfigError
from modelxray.core.subject import ModelInfo, Subject
from modelxray.quant.rtn import QuantSpec, fake_quantize, packed_bits
from modelxray.quant.targets import find_targets
from modelxray.quant.weight import WeightQuantizer


class TinyCNN(nn.Module):
    """Two convolutions (3 -> 8 -> 16 channels, 3x3 kernels) and a Linear head."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.head(x.mean(dim=(2, 3)))


@pytest.fixture
def cnn() -> TinyCNN:
    torch.manual_seed(0)
    return TinyCNN().eval()


def _rows(report) -> dict[str, dict]:
    return {r["module"]: r for r in report.tables["layers"]}


def test_conv_layers_are_targets_flattened_along_the_input(cnn):
    targets = {t.name: t for t in find_targets(cnn)}
    assert {n: t.kind for n, t in targets.items()} == {"conv1": "conv", "conv2": "conv", "head": "linear"}
    t = targets["conv2"]
    m = t.weight_matrix()
    assert m.shape == (16, 8 * 3 * 3) and m.data_ptr() == cnn.conv2.weight.data_ptr()  # a view
    # input channel outermost, kernel taps innermost: row o is weight[o].flatten()
    assert torch.equal(m[5], cnn.conv2.weight[5].flatten())
    before = cnn.conv2.weight.detach().clone()
    t.set_weight_matrix(m.detach().clone())  # reshaping back round-trips exactly
    assert torch.equal(cnn.conv2.weight, before)


def test_int8_per_channel_quantizes_the_convolutions(cnn):
    before = copy.deepcopy(cnn.state_dict())
    q, report = modelxray.quantize(cnn, "int8")
    assert all(torch.equal(v, cnn.state_dict()[k]) for k, v in before.items())  # the input is untouched
    rows = _rows(report)
    assert set(rows) == {"conv1", "conv2", "head"}  # the default targets are linear and conv
    assert rows["conv1"]["kind"] == "conv" and rows["conv1"]["format"] == "int8 sym per-channel"
    for name in ("conv1", "conv2"):
        w, qw = getattr(cnn, name).weight, getattr(q, name).weight
        assert not torch.equal(w, qw)
        assert rows[name]["rel_error"] < 0.01
        assert torch.linalg.vector_norm(w - qw) / torch.linalg.vector_norm(w) < 0.01
        # 255 levels at most per output channel, on one scale per output channel
        assert all(len(torch.unique(qw[o])) <= 255 for o in range(qw.shape[0]))
    # one fp16 scale per output channel: rows of 27, 72 and 16 inputs
    assert rows["conv1"]["packed_bytes"] == (8 * 27 * 8 + 8 * 16) / 8
    m = report.metrics
    elements = 8 * 27 + 16 * 72 + 10 * 16
    packed_bits_total = elements * 8 + (8 + 16 + 10) * 16
    assert m["params_quantized"] == elements
    assert m["effective_bits"] == pytest.approx(packed_bits_total / elements)
    assert 8 < m["effective_bits"] < 9
    biases = (8 + 16 + 10) * 4
    assert m["model_bytes_before"] == elements * 4 + biases
    assert m["model_bytes_after"] == pytest.approx(packed_bits_total / 8 + biases)


def test_int4_groups_run_along_the_flattened_input_with_a_narrower_last_group(cnn):
    quantizer = WeightQuantizer(bits=4, group_size=32)
    q, report = modelxray.quantize(cnn, quantizer)
    spec = QuantSpec(bits=4, group_size=32)
    w = cnn.conv2.weight.detach()
    expected = fake_quantize(w.reshape(16, 72), spec).reshape(w.shape)  # groups 32 + 32 + 8
    assert torch.equal(q.conv2.weight, expected)
    for a, b in [(0, 32), (32, 64), (64, 72)]:
        block = q.conv2.weight.reshape(16, 72)[:, a:b]
        assert all(len(torch.unique(block[o])) <= 15 for o in range(16))  # symmetric 4-bit levels
    rows = _rows(report)
    # hand computation: 16 x 72 weights at 4 bits, 16 rows x 3 groups (32, 32, 8) of one fp16 scale
    assert rows["conv2"]["packed_bytes"] == (16 * 72 * 4 + 16 * 3 * 16) / 8 == 672
    assert rows["conv2"]["packed_bytes"] == packed_bits((16, 72), spec) / 8
    assert rows["conv2"]["bytes_before"] == 16 * 72 * 4
    assert rows["conv1"]["packed_bytes"] == (8 * 27 * 4 + 8 * 1 * 16) / 8  # 27 < 32: one group a row
    assert 4 < report.metrics["effective_bits"] < 4 + 16 / 8
    assert rows["conv2"]["rel_error"] < 0.2


def test_weights_already_on_the_grid_come_back_unchanged(cnn):
    for quantizer in (WeightQuantizer(bits=8, granularity="channel"), WeightQuantizer(bits=4, group_size=32)):
        once, _ = modelxray.quantize(cnn, quantizer)
        twice, report = modelxray.quantize(once, quantizer)
        assert all(torch.equal(a, b) for a, b in zip(once.state_dict().values(), twice.state_dict().values()))
        assert report.metrics["weight_rel_error_max"] == 0.0


def test_channels_last_and_other_convolutions():
    torch.manual_seed(1)
    model = nn.Sequential(
        nn.Conv1d(4, 6, 5),
        nn.Conv2d(6, 6, 3, groups=6),  # depthwise: one input channel per group
        nn.Conv3d(2, 3, (2, 3, 3)),
        nn.ConvTranspose2d(6, 4, 3),  # not a target: its weight is stored (in, out, ...)
    )
    shapes = {t.name: tuple(t.weight_matrix().shape) for t in find_targets(model)}
    assert shapes == {"0": (6, 20), "1": (6, 9), "2": (3, 36)}
    q, report = modelxray.quantize(model, WeightQuantizer(bits=4, granularity="channel"))
    assert report.metrics["modules_quantized"] == 3
    assert torch.equal(q[3].weight, model[3].weight)
    assert report.metrics["effective_bits"] == pytest.approx(4 + 16 * (6 + 6 + 3) / (120 + 54 + 108))
    # a channels-last weight (not viewable as a matrix) quantizes to the same values
    cnn = TinyCNN()
    cl = copy.deepcopy(cnn).to(memory_format=torch.channels_last)
    assert not cl.conv2.weight.is_contiguous()
    a, _ = modelxray.quantize(cnn, "int4")
    b, _ = modelxray.quantize(cl, "int4")
    assert torch.equal(a.conv2.weight, b.conv2.weight) and not b.conv2.weight.is_contiguous()


def test_targets_and_skip_select_convolutions(cnn):
    assert WeightQuantizer().targets == ["linear", "conv"]
    _, only_linear = modelxray.quantize(cnn, WeightQuantizer(bits=8, targets=["linear"]))
    assert set(_rows(only_linear)) == {"head"}
    q, skipped = modelxray.quantize(cnn, WeightQuantizer(bits=8, skip=["conv1", "head"]))
    assert set(_rows(skipped)) == {"conv2"} and torch.equal(q.conv1.weight, cnn.conv1.weight)
    _, by_kind = modelxray.quantize(cnn, WeightQuantizer(bits=4, rules=[{"kind": "conv", "bits": 8}]))
    assert {n: r["bits"] for n, r in _rows(by_kind).items()} == {"conv1": 8, "conv2": 8, "head": 4}


def test_calibrated_methods_refuse_convolutions():
    from modelxray.quant.gptq import GPTQQuantizer

    assert GPTQQuantizer().targets == ["linear"]
    with pytest.raises(ConfigError, match=r"^targets: gptq calibrates Linear layers"):
        GPTQQuantizer(targets=["linear", "conv"])


# -- CLIP-style dual encoders ---------------------------------------------------------------------


def _tree(spec: dict) -> nn.Module:
    """A module tree from nested dicts of ``name -> module or dict``."""
    root = nn.Module()
    for name, child in spec.items():
        root.add_module(name, _tree(child) if isinstance(child, dict) else child)
    return root


def _layer(d: int) -> dict:
    return {"self_attn": {"q_proj": nn.Linear(d, d), "out_proj": nn.Linear(d, d)}, "mlp": _mlp(d)}


def _mlp(d: int) -> dict:
    return {"fc1": nn.Linear(d, 2 * d), "fc2": nn.Linear(2 * d, d)}


@pytest.fixture
def clip_like() -> nn.Module:
    torch.manual_seed(0)
    return _tree(
        {
            "vision_model": {
                "embeddings": {"patch_embedding": nn.Conv2d(3, 16, 4, stride=4, bias=False)},
                "encoder": {"layers": {"0": _layer(16), "1": _layer(16)}},
            },
            "text_model": {
                "embeddings": {"token_embedding": nn.Embedding(50, 16)},
                "encoder": {"layers": {"0": _layer(16)}},
            },
            "visual_projection": nn.Linear(16, 8, bias=False),
            "text_projection": nn.Linear(16, 8, bias=False),
        }
    )


def test_components_and_towers_of_a_clip_like_model(clip_like):
    t = {t.name: t for t in find_targets(clip_like)}
    assert t["vision_model.encoder.layers.0.mlp.fc1"].groups == ("mlp", "vision")
    assert t["vision_model.encoder.layers.1.self_attn.q_proj"].groups == ("attention", "vision")
    assert t["vision_model.embeddings.patch_embedding"].groups == ("embedding", "vision")
    assert t["text_model.encoder.layers.0.mlp.fc2"].groups == ("mlp", "text")
    assert t["visual_projection"].groups == ("projection", "vision")
    assert t["text_projection"].groups == ("projection", "text")


def test_a_vision_rule_applies_to_the_vision_tower_only(clip_like):
    quantizer = WeightQuantizer(bits=4, group_size=16, rules=[{"component": "vision", "bits": 8}])
    q, report = modelxray.quantize(clip_like, quantizer)
    bits = {n: r["bits"] for n, r in _rows(report).items()}
    vision = {n for n in bits if n.startswith("vision_model.") or n == "visual_projection"}
    assert "vision_model.encoder.layers.0.mlp.fc1" in vision and "vision_model.embeddings.patch_embedding" in vision
    assert {n for n, b in bits.items() if b == 8} == vision
    assert {n for n, b in bits.items() if b == 4} == set(bits) - vision
    assert "text_model.encoder.layers.0.mlp.fc1" in bits and "text_projection" in bits
    assert "text_model.embeddings.token_embedding" not in bits  # embeddings are not a default target
    assert _rows(report)["text_projection"]["tower"] == "text"
    # components still select inside both towers, and projection selects both projections
    rules = [{"component": "mlp", "bits": 6}, {"component": "projection", "bits": 8}]
    _, report = modelxray.quantize(clip_like, WeightQuantizer(bits=4, group_size=16, rules=rules))
    bits = {n: r["bits"] for n, r in _rows(report).items()}
    assert {n for n, b in bits.items() if b == 6} == {n for n in bits if ".mlp." in n}
    assert {n for n, b in bits.items() if b == 8} == {"visual_projection", "text_projection"}
    # negative blocks in a tower rule count from that tower's last block
    rules = [{"component": "text", "blocks": [-1], "bits": 8}, {"component": "vision", "blocks": [-1], "bits": 6}]
    _, report = modelxray.quantize(clip_like, WeightQuantizer(bits=4, group_size=16, rules=rules))
    bits = {n: r["bits"] for n, r in _rows(report).items()}
    assert {n for n, b in bits.items() if b == 8} == {n for n in bits if n.startswith("text_model.encoder.layers.0.")}
    assert {n for n, b in bits.items() if b == 6} == {n for n in bits if n.startswith("vision_model.encoder.layers.1.")}
    # the patch embedding (a convolution) and the projections are skippable by name
    skip = ["*patch_embedding", "*_projection"]
    _, report = modelxray.quantize(clip_like, WeightQuantizer(bits=8, granularity="channel", skip=skip))
    assert not any(n.endswith(("patch_embedding", "projection")) for n in _rows(report))


def test_a_real_clip_model_from_a_config():
    from transformers import CLIPConfig, CLIPModel

    text = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, vocab_size=64)
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=16)
    model = CLIPModel(CLIPConfig(text_config=text, vision_config={**vision, "patch_size": 8}, projection_dim=8))
    quantizer = WeightQuantizer(bits=4, group_size=16, rules=[{"component": "vision", "bits": 8}])
    _, report = modelxray.quantize(model, quantizer)
    for name, row in _rows(report).items():
        in_vision = name.startswith("vision_model.") or name == "visual_projection"
        assert row["bits"] == (8 if in_vision else 4), name
    assert _rows(report)["vision_model.embeddings.patch_embedding"]["kind"] == "conv"


def test_a_tower_rule_on_a_model_without_towers_matches_nothing(cnn):
    with pytest.raises(ConfigError, match=r"^quant\.rules\[0\]: matches no module"):
        modelxray.quantize(cnn, WeightQuantizer(rules=[{"component": "vision", "bits": 8}]))


# -- a quantizer that matches no module -------------------------------------------------------------


def test_a_model_without_linear_or_conv_is_an_error():
    model = nn.Sequential(nn.LayerNorm(4), nn.ReLU())
    with pytest.raises(ConfigError) as info:
        modelxray.quantize(model, "int8")
    message = str(info.value)
    assert message.startswith("quant: rtn int8 sym per-channel (targets linear, conv) matches no module of Sequential")
    assert "use quant=none" in message and "\n" not in message
    with pytest.raises(ConfigError, match=r"^quant: .* matches no module of norm\.pt "):
        modelxray.quantize(model, "int4", name="norm.pt")


def test_a_torchscript_model_is_an_error_naming_it(cnn):
    scripted = torch.jit.script(cnn)
    with pytest.raises(ConfigError) as info:
        modelxray.quantize(scripted, "int8")
    message = str(info.value)
    assert message.startswith("quant: ") and "matches no module of TinyCNN" in message
    assert "TorchScript" in message and "RecursiveScriptModule" in message and "quant=none" in message
    # the run's quant stage names the model file; the quantizer used directly raises too
    info_ = ModelInfo(name="gpt2_ts.pt", source_format="torchscript", source_dtype="float32")
    subject = Subject(scripted, None, None, info_, task="classification")
    with pytest.raises(ConfigError, match=r"^quant: rtn int4 sym g128 \(targets linear, conv\) matches no module "):
        WeightQuantizer(bits=4).apply(subject)
    with pytest.raises(ConfigError, match=r"matches no module of gpt2_ts\.pt \(a TorchScript model"):
        WeightQuantizer(bits=4).apply(subject)
    with pytest.raises(ConfigError, match=r"^quant: "):
        WeightQuantizer(bits=4).quantize(scripted)
    traced = torch.jit.trace(cnn, torch.randn(1, 3, 8, 8))
    with pytest.raises(ConfigError, match=r"TorchScript"):
        modelxray.quantize(traced, "int4")


def test_everything_skipped_is_an_error(cnn):
    with pytest.raises(ConfigError) as info:
        modelxray.quantize(cnn, WeightQuantizer(bits=4, skip=["conv*", "head"]))
    message = str(info.value)
    assert message.startswith("quant: rtn int4 sym g128 (targets linear, conv; skip conv*, head) matches no module")
    assert "2 conv" in message and "1 linear" in message
    with pytest.raises(ConfigError, match=r"^quant: .*\(targets embedding\) matches no module of TinyCNN"):
        modelxray.quantize(cnn, WeightQuantizer(bits=4, targets=["embedding"]))


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao not installed")
def test_torchao_on_a_torchscript_model_is_an_error(cnn):
    from modelxray.quant.torchao_backend import TorchaoQuantizer

    with pytest.raises(ConfigError, match=r"^quant: torchao int8_weight_only \(targets linear\) matches no module"):
        modelxray.quantize(torch.jit.script(cnn), TorchaoQuantizer())
