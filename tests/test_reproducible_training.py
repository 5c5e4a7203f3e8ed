"""The trained defaults train reproducibly: on one thread with deterministic algorithms whatever
``threads`` the run uses, so a fresh training gives the cached weights byte for byte; the cache key
holds what the weights still depend on (torch version, CPU instruction set); a first-run training
says what it trains and where it keeps it."""

import hashlib
import logging

import pytest
import torch

from modelxray.models import trained_cache
from modelxray.models.digits_classifier import DigitsClassifierSource
from modelxray.models.digits_clip import DigitsCLIPSource
from modelxray.models.digits_segmenter import DigitsSegmenterSource


def _digest(state: dict) -> str:
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode() + state[name].detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def _train_with_run_threads(threads: int, make) -> str:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        loaded = make().load()
        assert torch.get_num_threads() == threads  # the run's own setting is restored after training
        model = getattr(loaded.model, "net", loaded.model)
        return _digest(model.state_dict())
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(
    "make",
    [
        lambda: DigitsClassifierSource(arch="vit", epochs=1, use_disk_cache=False, progress=False),
        lambda: DigitsCLIPSource(epochs=1, use_disk_cache=False, progress=False),
    ],
    ids=["digits_vit", "digits_clip"],
)
def test_a_default_trains_to_the_same_bytes_whatever_the_run_threads(make):
    assert _train_with_run_threads(1, make) == _train_with_run_threads(2, make)


def test_a_trained_directory_is_the_same_bytes_whatever_the_run_threads(tmp_path):
    tiny = dict(width=8, decoder_width=16, steps=3, batch_size=2, progress=False, device="cpu")
    digests = []
    for threads in (1, 2):
        source = DigitsSegmenterSource(cache_dir=str(tmp_path / f"t{threads}"), **tiny)
        _train_with_run_threads(threads, lambda s=source: s)
        (weights,) = source.cache_path().glob("*.safetensors")
        digests.append(hashlib.sha256(weights.read_bytes()).hexdigest())
    assert digests[0] == digests[1]


def test_the_cache_key_holds_the_training_platform(tmp_path, monkeypatch):
    source = DigitsClassifierSource(arch="vit", cache_dir=str(tmp_path))
    here = source.cache_path()
    assert trained_cache.training_platform() == {
        "threads": 1,
        "torch": torch.__version__.split("+")[0],
        "cpu": torch.backends.cpu.get_cpu_capability(),
    }
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "OTHER")
    assert source.cache_path() != here  # weights trained on another instruction set are not reused


def test_a_first_run_training_says_what_it_trains_and_where_it_keeps_it(tmp_path, caplog):
    source = DigitsClassifierSource(arch="vit", epochs=1, cache_dir=str(tmp_path), progress=False)
    with caplog.at_level(logging.INFO, logger="modelxray.models"):
        source.load()
    (said,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Training")]
    assert said == (
        "Training digits-vit once (1 epochs of Adam on the digits train split, about 0 s on one core; "
        f"cached at {source.cache_path()})"
    )
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="modelxray.models"):
        source.load()  # cached: no training, nothing said
    assert not [r for r in caplog.records if r.getMessage().startswith("Training")]
