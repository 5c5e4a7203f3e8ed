"""modelxray: put a PyTorch / Hugging Face model under analysis and record everything in MLflow.

``import modelxray`` is light and has no side effects: the verbs load what they need when called.

    import modelxray
    out = modelxray.analyze(["model=tiny_gpt2", "analyzer=[performance]"])
    model, report = modelxray.quantize(my_model, "int4")
    benchmark = modelxray.get_quantization_analyzer("digits_clip").run_benchmark(["none", "int8", "int4"])
    analyzer = modelxray.ModelAnalyzer("model.pt"); analyzer.analyze_performance(data_loader)
"""

from modelxray.core.errors import ConfigError

__all__ = [
    "ConfigError",
    "ModelAnalyzer",
    "analyze",
    "analyze_checkpoints",
    "compose",
    "get_quantization_analyzer",
    "quantize",
]
__version__ = "0.1.0"


def __getattr__(name: str):
    import importlib  # the verbs load on first use; nothing heavy runs on ``import modelxray``

    if name in ("analyze", "compose"):
        return getattr(importlib.import_module("modelxray.api"), name)
    if name == "quantize":
        return importlib.import_module("modelxray.quant.verb").quantize
    if name == "analyze_checkpoints":
        return importlib.import_module("modelxray.checkpoint_analysis").analyze_checkpoints
    if name == "ModelAnalyzer":
        return importlib.import_module("modelxray.model_analyzer").ModelAnalyzer
    if name == "get_quantization_analyzer":
        return importlib.import_module("modelxray.quantization_api").get_quantization_analyzer
    raise AttributeError(f"module 'modelxray' has no attribute {name!r}")
