"""Model kinds from files and in memory: a generic module on named example inputs, TorchScript and
state-dict image classifiers, any nn.Module by ``_target_``; agreement with the unquantized outputs
as the quality a quantized run reports."""

import math

import numpy as np
import pytest
import torch
from torch import nn

import modelxray
from conftest import mlflow_runs, run_cli
from modelxray.core.errors import ConfigError
from modelxray.metrics.agreement import agreement, output_agreement, output_tensors
from modelxray.models.file import FileSource

FAST = ["progress=false", "threads=1", "tracker=none", "report.dashboard=false", "analyzer.performance.iters=2"]


class TwoInputs(nn.Module):
    """forward(a, b): scores of 5 classes from two inputs of different widths."""

    def __init__(self):
        super().__init__()
        self.fa, self.fb, self.head = nn.Linear(16, 32), nn.Linear(8, 32), nn.Linear(32, 5)

    def forward(self, a, b):
        return self.head(torch.relu(self.fa(a) + self.fb(b)))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(4, 8, 3, stride=2, padding=1)
        self.fc = nn.Linear(8 * 14 * 14, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.c2(torch.relu(self.c1(x)))).flatten(1))


class WithRate(nn.Module):
    """forward(x, sr: int): a speech detector that takes its sample rate as a plain int (as silero-vad)."""

    def __init__(self):
        super().__init__()
        self.conv, self.head = nn.Conv1d(1, 8, 16, stride=8), nn.Linear(8, 1)

    def forward(self, x: torch.Tensor, sr: int) -> torch.Tensor:
        if sr != 16000:
            raise ValueError(f"unsupported sample rate {sr}")
        return torch.sigmoid(self.head(torch.relu(self.conv(x.unsqueeze(1))).mean(-1)))


@pytest.fixture(autouse=True)
def _outputs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # modelxray.analyze writes outputs/api/... under the working directory


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("kinds")
    torch.manual_seed(0)
    two = TwoInputs().eval()
    torch.jit.trace(two, (torch.rand(2, 16), torch.rand(2, 8))).save(str(d / "two.pt"))
    torch.jit.trace(SmallCNN().eval(), torch.rand(1, 1, 28, 28)).save(str(d / "cnn28.pt"))
    torch.jit.script(WithRate().eval()).save(str(d / "rate.pt"))
    lin = nn.Linear(16, 4)
    torch.save(lin.state_dict(), d / "linear.pt")
    from safetensors.torch import save_file

    save_file({"a": torch.rand(3, 16), "b": torch.rand(3, 8)}, str(d / "inputs.safetensors"))
    return d


# -- the agreement metrics, by hand ---------------------------------------------------------------
def test_agreement_matches_a_hand_computation():
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(6, 3, 4, generator=g)
    out = ref + 0.3 * torch.randn(6, 3, 4, generator=g)
    got = agreement(ref, out, scores=True)
    r, o = ref.numpy().reshape(6, -1).astype(np.float64), out.numpy().reshape(6, -1).astype(np.float64)
    cos = (r * o).sum(1) / np.linalg.norm(r, axis=1) / np.linalg.norm(o, axis=1)
    assert got["cosine"] == pytest.approx(cos.mean(), abs=1e-12)
    assert got["cosine_se"] == pytest.approx(cos.std(ddof=1) / math.sqrt(6), abs=1e-12)
    assert got["rel_error"] == pytest.approx(np.linalg.norm(o - r) / np.linalg.norm(r), abs=1e-12)
    assert got["max_abs_error"] == pytest.approx(np.abs(o - r).max(), abs=1e-6)
    top = (ref.argmax(-1) == out.argmax(-1)).float().mean().item()  # over all 6 x 3 positions
    assert got["top1_agree"] == pytest.approx(top) and got["examples"] == 6
    same = agreement(ref, ref.clone(), scores=True)
    assert same["cosine"] == pytest.approx(1.0) and same["rel_error"] == 0 and same["top1_agree"] == 1


def test_agreement_leaves_out_figures_without_meaning():
    """One value per example: its cosine is 1 whenever the sign held, so none is given. Hidden states
    or a regression output: an arg-max agreement means nothing, so only outputs that score classes
    (named like logits, or listed by the user) get one."""
    from modelxray.metrics.agreement import output_agreement

    ref = torch.tensor([[1.0], [2.0], [-3.0]])
    moved = agreement(ref, ref * 1.5)
    assert "cosine" not in moved and moved["rel_error"] == pytest.approx(0.5)
    hidden = torch.randn(4, 5, 8)
    by_name = output_agreement(
        {"last_hidden_state": hidden, "logits": hidden}, {"last_hidden_state": hidden, "logits": hidden}
    )
    assert "top1_agree" not in by_name["last_hidden_state"] and by_name["logits"]["top1_agree"] == 1.0
    assert "top1_agree" in output_agreement(hidden, hidden, score_outputs=("output",))["output"]


def test_outputs_are_found_in_tensors_tuples_and_dicts():
    t = torch.ones(2, 3)
    assert list(output_tensors(t)) == ["output"]
    assert list(output_tensors((t, torch.ones(2, dtype=torch.long), [t]))) == ["output.0", "output.2.0"]
    assert list(output_tensors({"logits": t, "hidden": (t,)})) == ["logits", "hidden.0"]
    assert list(output_agreement({"logits": t}, {"logits": t})) == ["logits"]
    with pytest.raises(ValueError, match="differs from the reference"):
        agreement(torch.ones(2, 3), torch.ones(3, 2))


# -- model=file kinds, validated before any load ----------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kind": "generic"}, r"^inputs: a generic model runs on named example inputs"),
        ({"kind": "causal_lm", "inputs": {"a": [1, 16]}}, r"^inputs: declares a generic model's example inputs"),
        ({"input_shape": [28, 28]}, r"^input_shape: must be one image's \[channels, height, width\]"),
        ({"kind": "image_classification"}, r"^input_shape: a TorchScript image classifier needs"),
        ({"kind": "vision_language"}, r"^kind: vision_language models load from a Hugging Face directory"),
        ({"inputs": "missing.safetensors"}, r"^inputs: tensors file 'missing.safetensors' does not exist"),
        ({"inputs": {"a": [0, 16]}}, r"^inputs.a.shape: must be a list of positive sizes"),
    ],
)
def test_bad_kind_keys_fail_in_one_line_naming_the_key(files, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        FileSource(path=str(files / "two.pt"), **kwargs)


def test_a_target_module_needs_a_kind(files):
    arch = {"_target_": "torch.nn.Linear", "in_features": 16, "out_features": 4}
    with pytest.raises(ConfigError, match=r"^kind: a module built from _target_ has no config"):
        FileSource(path=str(files / "linear.pt"), architecture=arch)


def test_torchscript_with_inputs_is_generic_and_names_go_onto_positional_arguments(files):
    loaded = FileSource(path=str(files / "two.pt"), inputs={"x": [4, 16], "y": [4, 8]}).load()
    assert loaded.task == "generic" and loaded.example_inputs.n_examples == 4
    out = modelxray.analyze([*FAST, "model=file", f"model.path={files / 'two.pt'}", "model.inputs={x:[4,16],y:[4,8]}",
                             "analyzer=[performance,inspect]", "analyzer.inspect.energy=false"])  # fmt: skip
    assert not out.failed
    perf = out.results["performance"]
    assert perf.data["layer_time"]["skipped"].startswith("TorchScript")  # no hooks on ScriptModules
    assert "onto forward(a, b)" in perf.data["quality"]["protocol_description"]
    assert {"bs1_examples_per_s", "bs4_latency_p50_ms"} <= set(out.results["performance"].metrics)
    # FLOPs of the traced model on the declared inputs: 2 x (16x32 + 8x32 + 32x5) per example, plus the biases
    insp = out.results["inspect"].metrics
    assert insp["flops_total"] == 4 * 2 * (16 * 32 + 8 * 32 + 32 * 5)


def test_inputs_from_a_tensors_file(files):
    loaded = FileSource(path=str(files / "two.pt"), inputs=str(files / "inputs.safetensors")).load()
    assert loaded.task == "generic" and loaded.example_inputs.n_examples == 3
    assert loaded.example_inputs.source.startswith("tensors file")


def test_a_fixed_non_tensor_argument_goes_with_every_batch(files):
    """sr: {value: 16000} is passed as it is: inspect traces and profiles the scripted file, performance
    times it at every batch size; in Python an int among the example tensors does the same, and a
    quantized run compares outputs on the same inputs with it."""
    out = modelxray.analyze([*FAST, "model=file", f"model.path={files / 'rate.pt'}",
                             "model.inputs={x:[2,512],sr:{value:16000}}", "analyzer=[inspect,performance]",
                             "analyzer.inspect.energy=false", "analyzer.inspect.peak_matmul_size=256"])  # fmt: skip
    assert out.failed == []
    assert out.results["inspect"].metrics["flops_total"] > 0
    assert out.results["inspect"].data["input"]["inputs"]["sr"] == {"value": 16000}
    assert [r["batch_size"] for r in out.results["performance"].tables["speed"]] == [1, 4]
    torch.manual_seed(0)
    model = WithRate().eval()
    x = torch.rand(4, 512)
    out = modelxray.analyze([*FAST, "analyzer=[performance]", "quant=int8"], model=model,
                            example_inputs={"x": x, "sr": 16000})  # fmt: skip
    q, _ = modelxray.quantize(model, "int8")
    hand = agreement(model(x, 16000), q(x, 16000), scores=False)  # one value per example: no cosine
    m = out.results["performance"].metrics
    assert "output_cosine" not in m and m["output_rel_error"] == pytest.approx(hand["rel_error"], abs=1e-9)
    said = out.results["performance"].sentences(out.results)
    assert any(s.startswith("Outputs against the unquantized") and "output relative error" in s for s in said)
    with pytest.raises(ConfigError, match=r"^model\.inputs\.sr\.value: a fixed argument is \{value: X\}"):
        modelxray.analyze([*FAST, "model=file", f"model.path={files / 'rate.pt'}",
                           "model.inputs={x:[2,512],sr:{value:[1,2]}}"])  # fmt: skip


def test_a_quantized_target_module_reports_agreement_equal_to_quantizing_by_hand(files):
    arch = "{_target_: torch.nn.Linear, in_features: 16, out_features: 4}"
    out = modelxray.analyze([*FAST, "model=file", f"model.path={files / 'linear.pt'}", f"model.architecture={arch}",
                             "model.kind=generic", "model.inputs={input:[8,16]}", "quant=int4",
                             "analyzer=[performance]", "analyzer.performance.score_outputs=[output]"])  # fmt: skip
    m = out.results["performance"].metrics
    lin = nn.Linear(16, 4)
    lin.load_state_dict(torch.load(files / "linear.pt", weights_only=True))
    q, _ = modelxray.quantize(lin, "int4")
    x = FileSource(path=str(files / "linear.pt"), architecture=eval_arch(), kind="generic",
                   inputs={"input": [8, 16]}).load().example_inputs.tensors["input"]  # fmt: skip
    hand = agreement(lin(x), q(x), scores=True)
    assert m["output_cosine"] == pytest.approx(hand["cosine"], abs=1e-9)
    assert m["output_rel_error"] == pytest.approx(hand["rel_error"], abs=1e-9) and 0 < m["output_rel_error"] < 0.2
    assert m["output_top1_agree"] == pytest.approx(hand["top1_agree"])


def eval_arch():
    return {"_target_": "torch.nn.Linear", "in_features": 16, "out_features": 4}


def test_generic_models_refuse_analyzers_that_need_labels_or_tokens(files):
    with pytest.raises(ConfigError, match=r"^analyzer.robustness: .*generic model.*analyzer=performance or inspect"):
        modelxray.analyze([*FAST[:-1], "model=file", f"model.path={files / 'two.pt'}", "model.inputs={a:[1,16],b:[1,8]}",
                           "analyzer=[robustness]"])  # fmt: skip


# -- image classifiers from TorchScript and state dicts ---------------------------------------------
def test_a_torchscript_cnn_is_an_image_classifier_on_digits_fit_to_its_input(files):
    out = modelxray.analyze([*FAST, "model=file", f"model.path={files / 'cnn28.pt'}", "model.input_shape=[1,28,28]",
                             "dataset=digits", "analyzer=[performance]"])  # fmt: skip
    m = out.results["performance"].metrics
    assert 0 <= m["accuracy"] <= 1 and m["examples_scored"] == 450
    assert out.results["performance"].data["speed"][0]["input_shape"] == [1, 28, 28]


def test_a_vit_state_dict_built_from_a_model_type_mapping_reports_agreement_with_the_unquantized(tmp_path):
    from transformers import ViTConfig, ViTForImageClassification

    spec = dict(image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, num_channels=1, num_labels=10)  # fmt: skip
    torch.manual_seed(0)
    net = ViTForImageClassification(ViTConfig(**spec)).eval()
    torch.save(net.state_dict(), tmp_path / "vit.pt")
    arch = "{model_type: vit, " + ", ".join(f"{k}: {v}" for k, v in spec.items()) + "}"
    out = modelxray.analyze([*FAST, "model=file", f"model.path={tmp_path / 'vit.pt'}", f"model.architecture={arch}",
                             "dataset=digits", "quant=int3", "analyzer=[performance]"])  # fmt: skip
    m = out.results["performance"].metrics
    # by hand: the same quantization, the same fitted test images
    from modelxray.data.digits import load_digits_split
    from modelxray.data.images import fit_images

    data = fit_images(load_digits_split(0.25, 0), (1, 16, 16), "vit")
    q, _ = modelxray.quantize(net, "int3")
    with torch.no_grad():
        ref, got = net(pixel_values=data.x_test).logits, q(pixel_values=data.x_test).logits
    assert m["top1_agree"] == pytest.approx((ref.argmax(-1) == got.argmax(-1)).float().mean().item())
    kl = torch.nn.functional.kl_div(got.log_softmax(-1), ref.log_softmax(-1), log_target=True, reduction="batchmean")
    assert m["kl"] == pytest.approx(kl.item(), rel=1e-3) and m["kl_se"] > 0 and m["kl_max"] >= m["kl"]
    assert m["top1_agree_ci_low"] <= m["top1_agree"] <= m["top1_agree_ci_high"]


# -- in memory (Python) ---------------------------------------------------------------------------
def test_in_memory_generic_and_image_classifier(files):
    torch.manual_seed(0)
    tensors = {"a": torch.rand(4, 16), "b": torch.rand(4, 8)}
    out = modelxray.analyze([*FAST, "analyzer=[performance]", "quant=int8"], model=TwoInputs(), example_inputs=tensors)
    assert out.results["performance"].metrics["output_cosine"] > 0.999
    out = modelxray.analyze([*FAST, "analyzer=[performance]", "dataset=digits"], model=SmallCNN(),
                            image_shape=(1, 28, 28))  # fmt: skip
    assert out.results["performance"].metrics["examples_scored"] == 450
    with pytest.raises(ConfigError, match=r"^tokenizer: .*image_shape .*example_inputs"):
        modelxray.analyze([*FAST], model=SmallCNN())


@pytest.mark.slow  # a run.py process end to end (the in-process tests cover the numbers)
def test_cli_generic_run_is_logged_to_mlflow(files, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ["model=file", f"model.path={files / 'linear.pt'}", "model.architecture=" + str(eval_arch()).replace("'", ""),
            "model.kind=generic", "model.inputs={input:[8,16]}", "quant=int8", "analyzer=[performance,inspect]",
            "analyzer.inspect.energy=false", "analyzer.inspect.peak_matmul_size=256", "progress=false", "threads=1",
            "analyzer.performance.iters=2",
            "tracker=mlflow", f"tracker.uri={uri}", "tracker.experiment=generic"]  # fmt: skip
    proc = run_cli(args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    client, runs = mlflow_runs(uri, "generic")
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert {"performance/output_cosine", "performance/output_rel_error", "inspect/flops_total"} <= set(run.data.metrics)
    assert run.data.metrics["inspect/flops_total"] == 8 * 2 * 16 * 4
    assert run.data.params["model.kind"] == "generic"


def test_an_hf_encoder_directory_is_a_generic_model_with_every_output_compared(tmp_path):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    BertModel(cfg).save_pretrained(tmp_path / "bert")
    inputs = "{input_ids: {shape: [2, 12], high: 64}, attention_mask: [2, 12]}"
    out = modelxray.analyze([*FAST, "model=file", f"model.path={tmp_path / 'bert'}", "model.kind=generic",
                             f"model.inputs={inputs}", "quant=int8", "analyzer=[performance]"])  # fmt: skip
    perf = out.results["performance"]
    names = [row["output"] for row in perf.tables["output_agreement"]]
    assert names[:2] == ["last_hidden_state", "pooler_output"]
    assert 0.99 < perf.metrics["output_cosine"] <= 1.0 + 1e-9 and perf.data["layer_time"]["total_self_ms"] > 0


def test_an_hf_detector_directory_as_a_generic_model_keeps_its_heads(tmp_path):
    """A detection directory analysed as a generic model loads the class config.json names (heads
    included), never a bare AutoModel that drops them; a checkpoint tensor with no place is named."""
    from safetensors.torch import load_file, save_file

    import vision_task_models

    d = vision_task_models.yolos(tmp_path / "yolos")
    loaded = FileSource(path=str(d), kind="generic", inputs={"pixel_values": [1, 3, 32, 32]}).load()
    assert type(loaded.model).__name__ == "YolosForObjectDetection"
    saved = load_file(d / "model.safetensors")
    assert sum(p.numel() for p in loaded.model.parameters()) == sum(t.numel() for t in saved.values())
    assert "Loaded as YolosForObjectDetection (the class config.json names)." in loaded.info.notes
    saved["extra_head.weight"] = torch.zeros(3, 3)
    save_file(saved, str(d / "model.safetensors"))
    loaded = FileSource(path=str(d), kind="generic", inputs={"pixel_values": [1, 3, 32, 32]}).load()
    assert any(
        n.startswith(
            "1 tensors of the checkpoint have no place in YolosForObjectDetection and were dropped: extra_head.weight"
        )
        for n in loaded.info.notes
    )
