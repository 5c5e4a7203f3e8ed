"""dataset=sample_images: scikit-learn's two photos as seeded square crops labelled by photo, fit to
any image model, with one-line errors for bad keys and a run end to end on a tiny random ViT."""

import json

import pytest
import torch

from conftest import cli_results
from modelxray.core.errors import ConfigError
from modelxray.data.images import LUMA, fit_images
from modelxray.data.sample_images import SampleImages


@pytest.fixture(scope="module")
def crops():
    return SampleImages(crop_size=32, crops_per_class=20).load()


def test_crops_are_labelled_balanced_images_in_the_pixel_range(crops):
    assert crops.x_train.shape == (30, 3, 32, 32) and crops.x_test.shape == (10, 3, 32, 32)
    assert crops.input_shape == crops.meta["image_shape"] == (3, 32, 32) and crops.n_classes == 2
    assert crops.meta["class_names"] == ["china", "flower"]
    assert crops.y_train.bincount().tolist() == [15, 15] and crops.y_test.bincount().tolist() == [5, 5]
    assert crops.x_train.dtype == torch.float32 and 0.0 <= crops.x_train.min() and crops.x_train.max() <= 1.0
    (_, cut), (start, end) = crops.meta["bands"]["train"], crops.meta["bands"]["test"]
    assert cut == start == 480 and end == 640  # test crops come from the right quarter of each photo only
    # the photos differ in colour: the flower photo's crops are darker and redder than the temple's
    china, flower = (crops.x_train[crops.y_train == c].mean((0, 2, 3)) for c in (0, 1))
    assert china.mean() > flower.mean() and flower[0] > flower[2]


def test_crops_are_seeded():
    a, b = (SampleImages(crop_size=16, crops_per_class=8, seed=s).load() for s in (0, 0))
    c = SampleImages(crop_size=16, crops_per_class=8, seed=1).load()
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.x_test, b.x_test)
    assert not torch.equal(a.x_train, c.x_train) and torch.equal(a.y_train, c.y_train)


def test_colour_crops_fit_a_grey_model_and_a_larger_colour_model(crops):
    grey = fit_images(crops, (1, 8, 8), "m")
    assert grey.x_test.shape == (10, 1, 8, 8) and "grey" in grey.meta["colour"]
    luma = (crops.x_test * torch.tensor(LUMA).view(1, 3, 1, 1)).sum(1).mean((1, 2))
    assert torch.allclose(grey.x_test.mean((1, 2, 3)), luma, atol=0.02)  # a downscale keeps the mean brightness
    assert fit_images(crops, (3, 64, 64), "m").x_train.shape == (30, 3, 64, 64)


@pytest.mark.parametrize(
    "override,key",
    [
        ("dataset.crop_size=0", "dataset.crop_size"),
        ("dataset.crop_size=200", "dataset.crop_size"),  # wider than the 160-pixel test band
        ("dataset.test_fraction=1.0", "dataset.test_fraction"),
        ("dataset.crops_per_class=1", "dataset.crops_per_class"),  # no crop left for the test split
        ("+dataset.image_size=8", "dataset.image_size"),
    ],
)
def test_bad_keys_fail_in_one_line_naming_the_key(override, key):
    from modelxray.api import compose
    from modelxray.config.components import build_components

    with pytest.raises(ConfigError) as info:
        build_components(compose(["dataset=sample_images", override, "model=tiny_gpt2"]))
    assert str(info.value).startswith(f"{key}: ") and "\n" not in str(info.value)


def _vit(d):
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    cfg = ViTConfig(
        image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, num_labels=2,
    )  # fmt: skip
    ViTForImageClassification(cfg).save_pretrained(d)
    prep = {"image_mean": [0.5] * 3, "image_std": [0.25] * 3, "size": {"height": 16, "width": 16}}
    (d / "preprocessor_config.json").write_text(json.dumps(prep))
    return d


@pytest.mark.slow  # a run.py process end to end (the in-process tests cover the numbers)
def test_cli_a_random_vit_on_the_sample_images(tmp_path):
    args = [
        "model=hf",
        f"model.name_or_path={_vit(tmp_path / 'vit')}",
        "dataset=sample_images",
        "dataset.crop_size=48",
        "dataset.crops_per_class=40",
        "analyzer=performance",
        "analyzer.performance.iters=1",
        "analyzer.performance.layer_timing_iters=1",
        "analyzer.performance.speed_batch_sizes=[1]",
        "report.dashboard=false",
        "tracker=none",
        "threads=1",
        "progress=false",
    ]
    out = cli_results(args, tmp_path)
    quality = out["performance"]["data"]["quality"]
    assert quality["n_classes"] == 2 and quality["examples_scored"] == 20  # 10 test crops per photo
    assert 0.0 <= out["performance"]["metrics"]["accuracy"] <= 1.0
    assert out["performance"]["tables"]["speed"][0]["input_shape"] == [3, 16, 16]  # crops resized to the model
