"""The trained text and vision-language defaults (model=pydoc_bart, pydoc_bert, digits_vlm): they
load as their kind through the Hugging Face path, never train on the examples the evaluation scores,
and a second load reuses the cached directory. Tiny settings here; the real ones train in minutes (docs/model_kinds.md)."""

import pytest

from modelxray.core.errors import ConfigError
from modelxray.data.pydoc_topics import PydocTopics
from modelxray.kinds.table import named
from modelxray.models.pydoc_text import PydocTextSource, shipped_text

TINY = dict(vocab_size=300, dim=32, heads=2, ffn=64, depth=1, steps=3, batch_size=4, max_len=32, progress=False)


@pytest.mark.parametrize("arch, kind", [("bart", "seq2seq_lm"), ("t5", "seq2seq_lm"), ("bert", "masked_lm")])
def test_a_trained_default_loads_as_its_kind_and_is_cached(arch, kind, tmp_path):
    src = PydocTextSource(arch=arch, cache_dir=str(tmp_path), device="cpu", held_out_examples=4, **TINY)
    first = src.load()
    assert str(first.kind) == kind and first.info.name == f"pydoc-{arch}"
    assert first.info.notes[0].startswith("trained now: 3 steps")
    again = src.load()
    assert again.info.notes[0].startswith("trained before with these settings")
    assert (src.cache_path() / "tokenizer.json").is_file()
    other = PydocTextSource(
        arch=arch, cache_dir=str(tmp_path), device="cpu", held_out_examples=4, **{**TINY, "seed": 1}
    )
    assert other.cache_path() != src.cache_path()  # every setting that shapes the weights is in the key


def test_the_seq2seq_default_never_trains_on_the_evaluated_passages(tmp_path):
    src = PydocTextSource(arch="bart", cache_dir=str(tmp_path), device="cpu", held_out_examples=8, **TINY)
    loaded = src.load()
    data = named("seq2seq_lm").examples_for(PydocTopics(examples=8, cache_dir=str(tmp_path)), loaded)
    evaluated = set(data.meta["references"])
    assert evaluated == src.held_out_passages(shipped_text())
    trained = " ".join(src.training_words(shipped_text()))
    assert not [p for p in evaluated if p in trained]


def test_bad_settings_are_one_line():
    with pytest.raises(ConfigError, match=r"^arch: must be one of"):
        PydocTextSource(arch="gpt")
    with pytest.raises(ConfigError, match=r"^heads: must divide dim"):
        PydocTextSource(dim=30, heads=4)


def test_the_configs_hold_out_what_the_dataset_evaluates():
    from modelxray.api import compose
    from modelxray.config.components import build_components

    bart = build_components(compose(["model=pydoc_bart", "dataset.examples=10", "dataset.task_seed=3"])).model
    assert (bart.arch, bart.held_out_examples, bart.held_out_seed) == ("bart", 10, 3)
    bert = build_components(compose(["model=pydoc_bert", "dataset.seq_len=128", "dataset.mask_rate=0.2"])).model
    assert (bert.arch, bert.held_out_seq_len, bert.mask_rate) == ("bert", 128, 0.2)


def test_the_vision_language_default_loads_as_its_kind_and_is_cached(tmp_path):
    from modelxray.models.digits_vlm import DigitsVLMSource

    tiny = dict(dim=16, depth=1, heads=2, vocab_size=300, steps=2, batch_size=4, progress=False, device="cpu")
    src = DigitsVLMSource(cache_dir=str(tmp_path), **tiny)
    first = src.load()
    assert str(first.kind) == "image_text_to_text" and first.info.name == "digits-vlm"
    assert first.info.notes[0].startswith("trained now: 2 steps") and first.processor is not None
    assert src.load().info.notes[0].startswith("trained before")
    assert DigitsVLMSource(cache_dir=str(tmp_path), **{**tiny, "split_seed": 1}).cache_path() != src.cache_path()


def test_the_detector_default_loads_as_its_kind_and_learns_on_train_canvases(tmp_path):
    from modelxray.models.digits_detector import DigitsDetectorSource

    tiny = dict(width=32, queries=4, steps=2, batch_size=2, progress=False, device="cpu")
    src = DigitsDetectorSource(cache_dir=str(tmp_path), **tiny)
    first = src.load()
    assert str(first.kind) == "object_detection" and first.info.name == "digits-detector"
    assert first.info.notes[0].startswith("trained now: 2 steps") and first.processor is not None
    assert first.image_shape == (3, 64, 64) and first.model.mean.abs().sum() == 0  # RT-DETR reads raw pixels
    assert src.load().info.notes[0].startswith("trained before")
    assert DigitsDetectorSource(cache_dir=str(tmp_path), **{**tiny, "max_digits": 2}).cache_path() != src.cache_path()
    with pytest.raises(ConfigError, match=r"^canvas_size: must be a multiple of 32"):
        DigitsDetectorSource(canvas_size=50)
    with pytest.raises(ConfigError, match=r"^queries: must be at least max_digits"):
        DigitsDetectorSource(queries=2, max_digits=3)


def test_the_step_schedule_holds_the_rate_then_drops_it_tenfold():
    """DETR's recipe for the detector: warm-up over 5% of the steps, the rate held, a tenth of it
    for the last 10%; the rate multiplier is read from the scheduler optimize builds."""
    from unittest import mock

    import torch

    from modelxray.models.trained_cache import optimize

    net = torch.nn.Linear(1, 1)
    with mock.patch("torch.optim.lr_scheduler.LambdaLR") as scheduler:
        optimize(net, lambda _: net(torch.ones(1, 1)).sum(), 40, 1.0, 0.0, "", False, schedule="step")
    factor = scheduler.call_args[0][1]
    assert [factor(s) for s in (0, 1, 2, 10, 35)] == [0.5, 1.0, 1.0, 1.0, 1.0]
    assert factor(36) == factor(39) == 0.1


def test_the_segmenter_default_loads_as_a_segmenter_or_as_its_backbone(tmp_path):
    from modelxray.models.digits_segmenter import DigitsSegmenterSource

    tiny = dict(width=8, decoder_width=16, steps=2, batch_size=2, progress=False, device="cpu")
    src = DigitsSegmenterSource(cache_dir=str(tmp_path), **tiny)
    first = src.load()
    assert str(first.kind) == "semantic_segmentation" and first.info.name == "digits-segmenter"
    assert first.info.notes[0].startswith("trained now: 2 steps") and first.image_shape == (3, 64, 64)
    backbone = DigitsSegmenterSource(cache_dir=str(tmp_path), kind="image_features", **tiny).load()
    assert str(backbone.kind) == "image_features" and backbone.info.notes[0].startswith("trained before")
    assert (
        DigitsSegmenterSource(cache_dir=str(tmp_path), **{**tiny, "background_weight": 1.0}).cache_path()
        != src.cache_path()
    )
    with pytest.raises(ConfigError, match=r"^kind: must be one of semantic_segmentation, image_features"):
        DigitsSegmenterSource(kind="causal_lm")
