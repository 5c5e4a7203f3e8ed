"""Hugging Face image classifiers (ViT, ResNet) through model=hf: the kind comes from the config,
images are fit to the model's input, and models modelxray cannot analyze fail in one line."""

import json

import pytest
import torch

from conftest import mlflow_runs, run_cli
from modelxray.core.errors import ConfigError
from modelxray.data.digits import load_digits_split
from modelxray.data.images import fit_images
from modelxray.models.hf import HFSource


def _vit(d, num_labels=10, processor=True):
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    cfg = ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, num_labels=num_labels,
    )  # fmt: skip
    ViTForImageClassification(cfg).save_pretrained(d)
    if processor:
        prep = {"image_mean": [0.5] * 3, "image_std": [0.25] * 3, "size": {"height": 32, "width": 32}}
        (d / "preprocessor_config.json").write_text(json.dumps(prep))
    return d


@pytest.fixture(scope="module")
def vit_dir(tmp_path_factory):
    return _vit(tmp_path_factory.mktemp("vit"))


@pytest.fixture(scope="module")
def resnet_dir(tmp_path_factory):
    from transformers import ResNetConfig, ResNetForImageClassification

    d = tmp_path_factory.mktemp("resnet")
    torch.manual_seed(0)
    cfg = ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=10)
    ResNetForImageClassification(cfg).save_pretrained(d)
    return d


def test_a_vit_directory_loads_as_an_image_classifier_with_the_processors_normalisation(vit_dir):
    loaded = HFSource(name_or_path=str(vit_dir), device="cpu").load()
    assert loaded.task == "classification" and loaded.image_shape == (3, 32, 32) and loaded.tokenizer is None
    x = torch.rand(2, 3, 32, 32)
    expected = loaded.model.net(pixel_values=(x - 0.5) / 0.25).logits
    assert torch.allclose(loaded.model(x), expected)  # pixels in [0, 1] in, the processor's normalisation inside


def test_image_size_comes_from_the_config_or_processor_or_a_key_never_a_guess(resnet_dir):
    with pytest.raises(ConfigError, match=r"^model.image_size: .*names no image size"):
        HFSource(name_or_path=str(resnet_dir), device="cpu").load()
    loaded = HFSource(name_or_path=str(resnet_dir), device="cpu", image_size=24).load()
    assert loaded.image_shape == (3, 24, 24) and loaded.info.notes  # says pixels are not normalised
    assert loaded.model(torch.rand(1, 3, 24, 24)).shape == (1, 10)


def test_models_of_no_supported_kind_fail_in_one_line_naming_the_architecture(tmp_path):
    from transformers import BertConfig, BertForNextSentencePrediction

    small = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    BertForNextSentencePrediction(BertConfig(vocab_size=100, **small)).save_pretrained(tmp_path / "bert")
    with pytest.raises(ConfigError, match=r"^model: .*\(BertForNextSentencePrediction\) fits no model kind"):
        HFSource(name_or_path=str(tmp_path / "bert"), device="cpu").load()


def test_digits_are_resized_and_channel_expanded_inside_the_pixel_range():
    data = load_digits_split(max_test=20)
    fitted = fit_images(data, (3, 32, 32), "m")
    assert fitted.x_test.shape == (20, 3, 32, 32) and fitted.input_shape == (3, 32, 32)
    assert fitted.x_train.shape[1:] == (3, 32, 32) and torch.equal(fitted.y_test, data.y_test)
    assert fitted.x_test.min() >= 0.0 and fitted.x_test.max() <= 1.0
    assert torch.equal(fitted.x_test[:, 0], fitted.x_test[:, 2])  # grey: the same pixels in every channel
    # a 4x bilinear upscale keeps each image's mean brightness within a few percent
    assert torch.allclose(fitted.x_test[:, 0].mean((1, 2)), data.x_test.mean(1), atol=0.03)
    with pytest.raises(ConfigError, match="^dataset: .*feature vectors"):
        fit_images(load_digits_split(max_test=2).__class__(**{**data.__dict__, "meta": {}}), (3, 32, 32), "m")


@pytest.mark.slow  # several end-to-end runs: `pytest -m slow`
def test_cli_robustness_and_inspect_on_a_vit_are_tracked(vit_dir, tracking_uri, tmp_path):
    args = [
        "model=hf",
        f"model.name_or_path={vit_dir}",
        "dataset=digits",
        "dataset.max_test=64",
        "analyzer=[robustness,inspect,performance]",
        "analyzer.robustness.pgd_eps=[]",
        "analyzer.performance.iters=2",
        "analyzer.inspect.energy_seconds=0.5",
        "analyzer.inspect.power_sample_seconds=0.5",
        "analyzer.inspect.profile_iters=2",
        "analyzer.inspect.peak_matmul_size=256",
        "quant=int8",
        "progress=false",
        f"tracker.uri={tracking_uri}",
        "tracker.experiment=vit_cli",
    ]
    proc = run_cli(args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, runs = mlflow_runs(tracking_uri, "vit_cli")
    (run,) = runs
    m = run.data.metrics
    assert run.info.status == "FINISHED"
    assert 0.0 <= m["robustness/clean_accuracy"] <= 1.0 and "robustness/fgsm_0.03_top1_agree" in m
    n_params = sum(p.numel() for p in HFSource(name_or_path=str(vit_dir), device="cpu").load().model.parameters())
    assert m["quant/modules_quantized"] >= 1 and m["inspect/parameters"] == n_params
    assert m["inspect/flops_total"] > 0  # the forward ran on (1, 3, 32, 32) images
    assert m["performance/accuracy"] == m["robustness/clean_accuracy"]  # one model, one test split
    assert m["performance/bs1_examples_per_s"] > 0


@pytest.mark.slow  # a run.py process end to end (the CI runs the slow suite too)
def test_cli_an_image_model_on_text_or_too_few_labels_is_a_one_line_error(vit_dir, tmp_path):
    proc = run_cli(["model=hf", f"model.name_or_path={vit_dir}", "dataset=pydoc_topics", "tracker=none"], cwd=tmp_path)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and "holds text" in last and "image_classification" in last and "digits" in last
    few = _vit(tmp_path / "vit5", num_labels=5)
    proc = run_cli(["model=hf", f"model.name_or_path={few}", "dataset=digits", "tracker=none"], cwd=tmp_path)
    assert proc.returncode == 2 and "10 classes" in proc.stderr and "scores 5" in proc.stderr


def test_inspect_names_vision_transformers_and_dual_encoders(vit_dir, resnet_dir):
    from transformers import CLIPConfig, CLIPModel

    from modelxray.models.architecture import classify

    vit = HFSource(name_or_path=str(vit_dir), device="cpu").load().model
    assert classify(vit)[0] == "vision transformer"
    resnet = HFSource(name_or_path=str(resnet_dir), device="cpu", image_size=24).load().model
    assert classify(resnet)[0] == "CNN"
    small = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    clip = CLIPModel(CLIPConfig(text_config=small, vision_config={**small, "image_size": 32, "patch_size": 8}))
    assert classify(clip)[0] == "dual encoder (vision + text)"


def test_the_digits_vit_trains_seeded_and_is_cached_by_its_settings(tmp_path):
    from modelxray.data.digits import load_digits_split
    from modelxray.models.architecture import classify
    from modelxray.models.digits_classifier import DigitsClassifierSource
    from modelxray.quant.verb import quantize

    src = DigitsClassifierSource(arch="vit", epochs=2, cache_dir=str(tmp_path), device="cpu")
    first = src.load()
    assert first.info.notes[0].startswith("trained now") and src.cache_path().is_file()
    again = src.load()
    assert "loaded from" in again.info.notes[0]
    x = load_digits_split(max_test=16).x_test
    assert torch.equal(first.model(x), again.model(x))  # the cached weights are the trained ones
    fresh = DigitsClassifierSource(arch="vit", epochs=2, use_disk_cache=False, device="cpu").load()
    assert torch.equal(first.model(x), fresh.model(x))  # seeded: training again gives the same model
    assert DigitsClassifierSource(arch="vit", epochs=3, cache_dir=str(tmp_path)).cache_path() != src.cache_path()
    assert classify(first.model)[0] == "vision transformer"
    _, report = quantize(first.model, "int8")
    kinds = {row["kind"] for row in report.tables["layers"]}
    assert {"linear", "conv"} <= kinds  # the patch embedding is a convolution


def test_image_folder_reads_classes_and_matches_the_models_labels_by_name(tmp_path):
    from modelxray.data.image_folder import ImageFolder
    from modelxray.data.images import match_labels
    from test_configs import _image_folder

    data = ImageFolder(root=str(_image_folder(tmp_path)), image_size=16).load()
    assert data.meta["class_names"] == ["bright", "dark"] and data.x_test.shape == (6, 3, 16, 16)
    assert data.y_test.tolist() == [0, 0, 0, 1, 1, 1]
    assert data.x_test[:3].mean() > 0.8 and data.x_test[3:].mean() < 0.2  # pixels in [0, 1]
    matched = match_labels(data, {"cat": 0, "dark": 1, "bright": 2}, "m")
    assert matched.y_test.tolist() == [2, 2, 2, 1, 1, 1] and matched.n_classes == 3
    assert match_labels(data, {"cat": 0}, "m") is data  # names the model does not know: dataset order stands
    with pytest.raises(ConfigError, match="^root: .*does not exist"):
        ImageFolder(root=str(tmp_path / "nope"))


@pytest.mark.slow  # a run.py process end to end (the CI runs the slow suite too)
def test_cli_a_vit_on_an_image_folder(vit_dir, tmp_path):
    from test_configs import _image_folder

    root = _image_folder(tmp_path / "imgs", size=20, per_class=4)
    args = ["model=hf", f"model.name_or_path={vit_dir}", "dataset=image_folder", f"dataset.root={root}"]
    proc = run_cli([*args, "analyzer=performance", "analyzer.performance.iters=1", "tracker=none"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (report,) = (tmp_path / "outputs").rglob("summary_report.md")
    assert "8 test samples of shape (3, 32, 32)" in report.read_text()  # read at 224, fit to the ViT's 32


def test_an_image_classifier_without_a_dataset_is_scored_on_its_kinds_data(tmp_path):
    """No dataset= given: the default text stands for an image classifier's own offline data (digits),
    and the report says so; a TorchScript CNN file also tells its input size through its forward."""
    import modelxray

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 8 * 8, 10)
    ).eval()
    torch.jit.save(torch.jit.trace(net, torch.zeros(1, 1, 8, 8)), tmp_path / "cnn.pt")
    args = [
        "model=file",
        f"model.path={tmp_path / 'cnn.pt'}",
        "tracker=none",
        "progress=false",
        "report.dashboard=false",
    ]
    out = modelxray.analyze([*args, "analyzer.performance.iters=1"], output_dir=tmp_path / "run")
    assert not out.failed, out.results["performance"].error
    assert out.metrics["performance/examples_scored"] == 450  # the digits test split, as 1x8x8 images
    report = (tmp_path / "run" / "summary_report.md").read_text()
    assert (
        "scored on scikit-learn's digits" in report
        and "the only common image size its forward runs on: 1x8x8" in report
    )
