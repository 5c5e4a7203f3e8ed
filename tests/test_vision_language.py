"""CLIP-style dual encoders (CLIPModel, SiglipModel) as zero-shot classifiers: model=hf on their
directories and the trained digits_clip, through one ZeroShotClassifier path."""

import json

import pytest
import torch

from conftest import mlflow_runs, run_cli
from modelxray.core.errors import ConfigError
from modelxray.data.digits import load_digits_split
from modelxray.models.hf import HFSource

SMALL = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
TEXT = {**SMALL, "vocab_size": 300, "eos_token_id": 256, "max_position_embeddings": 40}


def _clip(d, text=TEXT, processor=True):
    from transformers import CLIPConfig, CLIPModel

    torch.manual_seed(0)
    vision = {**SMALL, "image_size": 16, "patch_size": 8}
    CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)).save_pretrained(d)
    if processor:
        prep = {"image_mean": [0.5] * 3, "image_std": [0.25] * 3, "size": {"shortest_edge": 16}}
        (d / "preprocessor_config.json").write_text(json.dumps(prep))
    return d


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory):
    return _clip(tmp_path_factory.mktemp("clip"))


@pytest.fixture(scope="module")
def siglip_dir(tmp_path_factory):
    from transformers import SiglipConfig, SiglipModel

    d = tmp_path_factory.mktemp("siglip")
    torch.manual_seed(0)
    text = {**SMALL, "vocab_size": 300, "max_position_embeddings": 32}
    SiglipModel(
        SiglipConfig(text_config=text, vision_config={**SMALL, "image_size": 16, "patch_size": 8})
    ).save_pretrained(d)
    return d


def _digits_names():
    return [str(i) for i in range(10)]


def test_dual_encoder_directories_are_the_vision_language_kind(clip_dir, siglip_dir):
    from transformers import AutoConfig

    from modelxray.kinds.table import kind_of_config
    from modelxray.models.vision_language import ZeroShotClassifier

    for d in (clip_dir, siglip_dir):
        assert kind_of_config(AutoConfig.from_pretrained(d), str(d)).name == "vision_language"
    loaded = HFSource(name_or_path=str(clip_dir), device="cpu").load()
    assert loaded.task == "classification" and loaded.image_shape == (3, 16, 16)
    assert isinstance(loaded.model, ZeroShotClassifier) and loaded.model.family == "clip"
    assert loaded.tokenizer.name_or_path == "byte" and "byte tokenizer" in loaded.info.notes[0]
    with pytest.raises(RuntimeError, match="no classes yet"):
        loaded.model(torch.rand(1, 3, 16, 16))  # unbound: the run binds it to the dataset's classes
    siglip = HFSource(name_or_path=str(siglip_dir), device="cpu").load()
    assert siglip.model.family == "siglip" and any("without normalisation" in n for n in siglip.info.notes)


def test_a_dual_encoder_with_a_trained_vocabulary_and_no_tokenizer_is_one_line(tmp_path):
    """A SigLIP directory of 32,000 text ids without its tokenizer: byte ids would be other tokens
    than it learned, so it stops in one line instead of scoring garbage."""
    from transformers import SiglipConfig, SiglipModel

    text = {**SMALL, "vocab_size": 32000, "max_position_embeddings": 32}
    SiglipModel(
        SiglipConfig(text_config=text, vision_config={**SMALL, "image_size": 16, "patch_size": 8})
    ).save_pretrained(tmp_path)
    with pytest.raises(
        ConfigError,
        match=r"^model.tokenizer: .* has no tokenizer .* a text vocabulary of 32000 ids, which a trained tokenizer made",
    ):
        HFSource(name_or_path=str(tmp_path), device="cpu").load()
    assert HFSource(name_or_path=str(tmp_path), device="cpu", tokenizer="byte").load().tokenizer.name_or_path == "byte"


def test_zero_shot_logits_are_the_dual_encoders_own_similarities(clip_dir, siglip_dir):
    loaded = HFSource(name_or_path=str(clip_dir), device="cpu").load()
    clf = loaded.model.for_classes(_digits_names(), loaded.tokenizer, "a photo of the digit {label}")
    assert clf.prompts[3] == "a photo of the digit 3" and clf.input_ids.shape == (10, 23)
    assert (clf.input_ids[:, 22] == 256).all() and clf.attention_mask.all()  # ends where CLIP pools (eos 256)
    net, x = clf.net, torch.rand(4, 3, 16, 16)
    with torch.no_grad():
        image = net.get_image_features(pixel_values=(x - 0.5) / 0.25).pooler_output
        text = net.get_text_features(input_ids=clf.input_ids, attention_mask=clf.attention_mask).pooler_output
        image, text = image / image.norm(dim=-1, keepdim=True), text / text.norm(dim=-1, keepdim=True)
        expected = net.logit_scale.exp() * image @ text.T
        assert torch.allclose(clf(x), expected, atol=1e-5)
        assert torch.allclose(clf(x), net(input_ids=clf.input_ids, pixel_values=(x - 0.5) / 0.25).logits_per_image)
        # the text tower runs in every forward: noise in it moves the logits
        w = net.text_model.encoder.layers[0].mlp.fc1.weight
        w.add_(torch.randn_like(w))
        assert not torch.allclose(clf(x), expected, atol=1e-3)

    sig = HFSource(name_or_path=str(siglip_dir), device="cpu").load()
    clf = sig.model.for_classes(["cat", "dog"], sig.tokenizer, "a photo of a {label}.")
    assert clf.input_ids.shape == (2, 32) and clf.attention_mask is None  # padded to max length, as trained
    with torch.no_grad():
        out = clf.net(input_ids=clf.input_ids, pixel_values=x).logits_per_image  # SigLIP: scale and bias
        assert torch.allclose(clf(x), out, atol=1e-5)


def test_templates_and_tokenizers_fail_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^prompt_template: must contain \{label\}"):
        HFSource(name_or_path=str(tmp_path), prompt_template="a photo of a digit")
    small_vocab = _clip(tmp_path / "clip100", text={**TEXT, "vocab_size": 100, "eos_token_id": 99})
    with pytest.raises(
        ConfigError, match=r"^model.tokenizer: .*no tokenizer.*vocabulary of 100 ids, which cannot hold"
    ):
        HFSource(name_or_path=str(small_vocab), device="cpu").load()
    bad_eos = _clip(tmp_path / "clip_eos", text={**TEXT, "eos_token_id": 49407})
    loaded = HFSource(name_or_path=str(bad_eos), device="cpu").load()
    with pytest.raises(ConfigError, match=r"^model.tokenizer: .*eos_token_id \(49407\) is outside"):
        loaded.model.for_classes(["a", "b"], loaded.tokenizer)


@pytest.mark.slow  # several end-to-end runs: `pytest -m slow`
def test_cli_zero_shot_clip_is_analyzed_and_quantized_in_both_towers(clip_dir, tracking_uri, tmp_path):
    args = [
        "model=hf",
        f"model.name_or_path={clip_dir}",
        "dataset=digits",
        "dataset.max_test=64",
        "analyzer=[performance,robustness]",
        "analyzer.robustness.pgd_eps=[]",
        "analyzer.performance.iters=2",
        "quant=int8",
        "threads=1",
        "progress=false",
        f"tracker.uri={tracking_uri}",
        "tracker.experiment=clip_cli",
    ]
    proc = run_cli(args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, runs = mlflow_runs(tracking_uri, "clip_cli")
    (run,) = runs
    m = run.data.metrics
    assert run.info.status == "FINISHED"
    assert 0.0 <= m["performance/accuracy"] <= 1.0 and m["performance/accuracy"] == m["robustness/clean_accuracy"]
    assert m["quant/modules_quantized"] >= 2 and "robustness/fgsm_0.03_top1_agree" in m
    # retrieval both ways, and how far int8 moved each tower's embeddings and the predictions
    assert m["performance/image_to_text_recall_at_1"] == pytest.approx(m["performance/accuracy"])
    assert 0 <= m["performance/text_to_image_recall_at_1"] <= 1
    assert 0.9 < m["performance/image_embedding_cosine"] <= 1 and 0.9 < m["performance/text_embedding_cosine"] <= 1
    assert 0 <= m["performance/kl"] and 0 <= m["performance/top1_agree"] <= 1
    (results,) = (tmp_path / "outputs").rglob("analysis_results.json")
    payload = json.loads(results.read_text())
    towers = {row.get("tower") for row in payload["results"]["quant"]["tables"]["layers"]}
    assert {"vision", "text"} <= towers  # RTN reached both towers of the wrapped dual encoder
    notes = " ".join(payload["run"]["model"]["notes"])
    assert "'a photo of the digit {label}'" in notes and "zero-shot accuracy" in notes


def test_digits_clip_trains_seeded_caches_and_classifies_zero_shot(tmp_path):
    from modelxray.models.digits_clip import DigitsCLIPSource

    quick = dict(epochs=10, lr=0.003, device="cpu")
    src = DigitsCLIPSource(cache_dir=str(tmp_path), save_pretrained=str(tmp_path / "hf"), **quick)
    first = src.load()
    assert first.info.notes[0].startswith("trained now") and src.cache_path().is_file()
    again = src.load()
    assert "loaded from" in again.info.notes[0]
    fresh = DigitsCLIPSource(use_disk_cache=False, **quick).load()
    data = load_digits_split()
    names = data.meta["class_names"]
    bound = [m.model.for_classes(names, m.tokenizer, data.meta["prompt_template"]) for m in (first, again, fresh)]
    with torch.inference_mode():
        logits = [b(data.x_test) for b in bound]
    assert torch.equal(logits[0], logits[1]) and torch.equal(logits[0], logits[2])  # cached = trained = seeded
    accuracy = float((logits[0].argmax(-1) == data.y_test).float().mean())
    assert accuracy > 0.6  # chance is 0.1; the default 60 epochs reach 0.96
    assert DigitsCLIPSource(cache_dir=str(tmp_path), epochs=11).cache_path() != src.cache_path()
    # the saved Hugging Face directory loads through model=hf as the same zero-shot classifier
    hf = HFSource(name_or_path=str(tmp_path / "hf"), device="cpu").load()
    with torch.inference_mode():
        same = hf.model.for_classes(names, hf.tokenizer, data.meta["prompt_template"])(data.x_test)
    assert type(hf.model) is type(first.model) and torch.allclose(same, logits[0], atol=1e-5)


@pytest.mark.slow  # a run.py process end to end (the CI runs the slow suite too)
def test_cli_digits_clip_performance_and_a_template_without_label(tmp_path):
    common = ["model=digits_clip", f"model.cache_dir={tmp_path}", "model.epochs=2", "threads=1", "tracker=none"]
    proc = run_cli([*common, "analyzer=performance", "analyzer.performance.iters=1"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (report,) = (tmp_path / "outputs").rglob("summary_report.md")
    assert "zero-shot accuracy" in report.read_text()
    proc = run_cli([*common, "model.prompt_template=a photo of a digit"], cwd=tmp_path)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and "model.prompt_template: must contain {label}" in last


@pytest.mark.slow  # the default training: about 20 s on 2 cores
def test_digits_clip_default_reaches_high_zero_shot_accuracy(tmp_path):
    from modelxray.models.digits_clip import DigitsCLIPSource

    loaded = DigitsCLIPSource(retrain=True, use_disk_cache=False, device="cpu").load()  # trained, not shipped
    data = load_digits_split()
    clf = loaded.model.for_classes(data.meta["class_names"], loaded.tokenizer, data.meta["prompt_template"])
    with torch.inference_mode():
        assert float((clf(data.x_test).argmax(-1) == data.y_test).float().mean()) >= 0.93


def test_the_run_binds_the_datasets_class_names_and_template(clip_dir, tmp_path):
    import dataclasses

    from modelxray.app import _bind_class_prompts, _fit_images
    from modelxray.data.image_folder import ImageFolder
    from test_configs import _image_folder

    loaded = HFSource(name_or_path=str(clip_dir), device="cpu").load()
    data = _fit_images(ImageFolder(root=str(_image_folder(tmp_path)), image_size=16).load(), loaded)
    bound = _bind_class_prompts(data, loaded)
    assert bound.model.prompts == ["a photo of a bright.", "a photo of a dark."] and bound.model is not loaded.model
    assert bound.model(data.x_test).shape == (6, 2) and loaded.model.input_ids is None  # the cached model stays unbound
    custom = HFSource(name_or_path=str(clip_dir), device="cpu", prompt_template="{label} pixels").load()
    assert _bind_class_prompts(data, custom).model.prompts == ["bright pixels", "dark pixels"]
    nameless = dataclasses.replace(data, meta={"image_shape": data.meta["image_shape"]})
    with pytest.raises(ConfigError, match="^dataset: .*names no classes"):
        _bind_class_prompts(nameless, loaded)
