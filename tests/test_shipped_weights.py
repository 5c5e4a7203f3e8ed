"""The trained defaults' weights ship with modelxray: every default loads them without training, and
they match the manifest's digests; ``model.retrain=true`` trains afresh into this machine's
platform-keyed cache (never the shipped folder); other settings train (and cache) as before; a
damaged shipped file stops the run with one line."""

import shutil

import pytest

from conftest import load_script
from modelxray.api import compose
from modelxray.config.components import build_components
from modelxray.core.errors import ConfigError
from modelxray.models import trained_cache
from modelxray.models.digits_classifier import DigitsClassifierSource

ship = load_script("ship_trained_defaults")


@pytest.fixture
def no_training(monkeypatch):
    """Any training fails the test: the defaults must load what ships."""

    def refuse(name, *_):
        raise AssertionError(f"{name} trained instead of loading its shipped weights")

    monkeypatch.setattr(trained_cache, "reproducible_training", refuse)


@pytest.mark.parametrize("default", list(ship.DEFAULTS))
def test_every_default_loads_its_shipped_weights_without_training(default, no_training, tmp_path):
    source = ship.source_of(ship.DEFAULTS[default], tmp_path)
    loaded = source.load()
    assert loaded.info.notes[0].startswith("the weights shipped with modelxray for these settings")
    assert str(trained_cache.SHIPPED / source.trained_key().shipped_name) in loaded.info.notes[0]
    assert not any(tmp_path.iterdir())  # nothing trained, nothing cached


def test_the_shipped_files_match_the_manifest():
    assert ship.check(trained_cache.SHIPPED) == []
    entries = trained_cache.read_manifest()
    assert {e["default"] for e in entries.values()} == set(ship.DEFAULTS)
    for entry in entries.values():
        assert entry["command"] == trained_cache.SHIP and set(entry["platform"]) == {"threads", "torch", "cpu"}


def _snapshot(folder):
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def test_retrain_trains_afresh_into_the_platform_keyed_cache_not_the_package(tmp_path):
    before = _snapshot(trained_cache.SHIPPED)
    source = DigitsClassifierSource(cache_dir=str(tmp_path), retrain=True, progress=False)
    assert source.trained_key().shipped_name in trained_cache.read_manifest()  # the shipped settings
    assert source.load().info.notes[0].startswith("trained now: 40 epochs")
    assert [p.name for p in tmp_path.iterdir()] == [source.cache_path().name]
    assert source.cache_path().name != source.trained_key().shipped_name  # keyed by the platform too
    assert _snapshot(trained_cache.SHIPPED) == before
    again = DigitsClassifierSource(cache_dir=str(tmp_path), progress=False).load()
    assert again.info.notes[0].startswith("the weights shipped with modelxray")  # shipped first, not retrain


def test_other_settings_train_then_load_from_the_machines_cache(tmp_path):
    source = DigitsClassifierSource(seed=1, epochs=2, cache_dir=str(tmp_path), progress=False)
    assert source.trained_key().shipped_name not in trained_cache.read_manifest()
    assert source.load().info.notes[0].startswith("trained now: 2 epochs")
    assert source.load().info.notes[0].startswith("trained before with these settings")
    assert source.cache_path().is_file()


def test_a_composed_run_with_retrain_instantiates(tmp_path):
    cfg = compose(["model=digits_mlp", "model.retrain=true", f"model.cache_dir={tmp_path}"])
    model = build_components(cfg, skip_dataset=True).model
    assert model.retrain is True and isinstance(model, DigitsClassifierSource)
    for name in ("digits_clip", "digits_vlm", "digits_detector", "digits_segmenter", "pydoc_bart", "pydoc_bert"):
        assert build_components(compose([f"model={name}", "model.retrain=true"]), skip_dataset=True).model.retrain


@pytest.mark.parametrize("damage", ["missing", "changed"])
def test_a_damaged_shipped_file_is_one_line(damage, tmp_path, monkeypatch):
    folder = tmp_path / "shipped"
    shutil.copytree(trained_cache.SHIPPED, folder, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(trained_cache, "SHIPPED", folder)
    source = DigitsClassifierSource(cache_dir=str(tmp_path / "cache"), progress=False)
    weights = folder / source.trained_key().shipped_name
    weights.unlink() if damage == "missing" else weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    said = "missing, though manifest.json lists it" if damage == "missing" else "sha256 differs from the one"
    with pytest.raises(ConfigError, match=rf"^{weights}: {said}.*; run python scripts/ship_trained_defaults.py"):
        source.load()
    retrained = DigitsClassifierSource(cache_dir=str(tmp_path / "cache"), retrain=True, progress=False).load()
    assert retrained.info.notes[0].startswith("trained now")  # the fix it names works
