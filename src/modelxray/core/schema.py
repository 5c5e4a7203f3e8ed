"""The config schema: every component's dataclass defaults, registered in Hydra's ConfigStore.

The dataclasses are the single source of defaults. Each is stored as ``schema/<group>/<name>``
(its ``_target_`` plus every field's default), and a YAML option starts from it and holds only
what differs::

    # conf/quant/int4.yaml
    defaults:
      - /schema/quant/weight@_here_
      - _self_
    bits: 4

Nodes are plain mappings, not structured configs: the dataclasses validate themselves when
instantiated (one-line errors naming the dotted key), so OmegaConf's typing adds nothing here.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

# group -> schema name -> the config dataclass (module path, class name)
SCHEMA: dict[str, dict[str, str]] = {
    "model": {
        "gguf": "modelxray.models.gguf.GGUFSource",
        "hf": "modelxray.models.hf.HFSource",
        "file": "modelxray.models.file.FileSource",
        "tiny_gpt2": "modelxray.models.tiny_gpt2.TinyGPT2Source",
        "digits_mlp": "modelxray.models.digits_classifier.DigitsClassifierSource",
        "digits_clip": "modelxray.models.digits_clip.DigitsCLIPSource",
        "pydoc_text": "modelxray.models.pydoc_text.PydocTextSource",
        "digits_vlm": "modelxray.models.digits_vlm.DigitsVLMSource",
        "digits_detector": "modelxray.models.digits_detector.DigitsDetectorSource",
        "digits_segmenter": "modelxray.models.digits_segmenter.DigitsSegmenterSource",
        "mlp": "modelxray.models.grokking.MLPSource",
        "grokking_transformer": "modelxray.models.grokking.GrokkingTransformerSource",
    },
    "dataset": {
        "pydoc_topics": "modelxray.data.pydoc_topics.PydocTopics",
        "text_files": "modelxray.data.text_files.TextFiles",
        "hf": "modelxray.data.hf_dataset.HFDataset",
        "digits": "modelxray.data.digits.Digits",
        "digits_noisy": "modelxray.data.digits_variants.DigitsNoisy",
        "digits_spurious": "modelxray.data.digits_variants.DigitsSpurious",
        "modular_addition": "modelxray.data.modular_addition.ModularArithmetic",
        "image_folder": "modelxray.data.image_folder.ImageFolder",
        "sample_images": "modelxray.data.sample_images.SampleImages",
        "labelled_text": "modelxray.data.user_text.LabelledText",
        "text_pairs": "modelxray.data.user_text.TextPairs",
        "image_questions": "modelxray.data.user_text.ImageQuestions",
        "audio_folder": "modelxray.data.audio_folder.AudioFolder",
        "digit_canvases": "modelxray.data.digit_canvases.DigitCanvases",
        "coco_folder": "modelxray.data.coco_folder.CocoFolder",
        "mask_folder": "modelxray.data.mask_folder.MaskFolder",
    },
    "analyzer": {
        "performance": "modelxray.analyzers.performance.PerformanceAnalyzer",
        "robustness": "modelxray.analyzers.robustness.RobustnessAnalyzer",
        "inspect": "modelxray.analyzers.inspect.InspectAnalyzer",
        "bitwidth": "modelxray.analyzers.bitwidth.BitwidthAnalyzer",
        "quant_impact": "modelxray.analyzers.quant_impact.QuantImpactAnalyzer",
        "lm_eval": "modelxray.analyzers.lm_eval.LmEvalAnalyzer",
        "learning_dynamics": "modelxray.analyzers.learning_dynamics.CheckpointDynamicsAnalyzer",
    },
    "quant": {
        "none": "modelxray.quant.none.NoQuant",
        "weight": "modelxray.quant.weight.WeightQuantizer",
        "gptq": "modelxray.quant.gptq.GPTQQuantizer",
        "awq": "modelxray.quant.awq.AWQQuantizer",
        "cast": "modelxray.quant.cast.CastQuantizer",
        "torchao": "modelxray.quant.torchao_backend.TorchaoQuantizer",
        "quanto": "modelxray.quant.quanto_backend.QuantoQuantizer",
        "hqq": "modelxray.quant.hqq_backend.HQQQuantizer",
        "gguf": "modelxray.quant.gguf_backend.GGUFQuantizer",
        "bnb": "modelxray.quant.bnb_backend.BitsAndBytesQuantizer",
        "compressed_tensors": "modelxray.quant.ct_backend.CompressedTensorsQuantizer",
    },
    "tracker": {
        "mlflow": "modelxray.tracking.mlflow_tracker.MlflowTracker",
        "none": "modelxray.tracking.base.NullTracker",
    },
    "reference": {
        "none": "modelxray.models.reference.NoReference",
    },
    "train": {
        "train": "modelxray.training.config.TrainConfig",
        "none": "modelxray.training.config.NoTraining",
    },
}


# the run's own top-level keys (seed, threads, runtime.*, report.* ...), stored as ``schema/settings``
# without a ``_target_``: ``conf/config.yaml`` starts from it
SETTINGS = "modelxray.config.settings.RunSettings"

# ``field(default="", metadata=REQUIRED)``: a key the user must set (the schema holds ``???``),
# for fields that cannot go without a default in a dataclass whose base fields have defaults.
REQUIRED = {"required": True}


def load_class(path: str) -> type:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _plain(value: Any) -> Any:
    """A default as OmegaConf can hold it (nested dataclasses become mappings)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def defaults_of(cls: type) -> dict[str, Any]:
    """``_target_`` and every init field's default. Fields without a default, or marked
    ``field(default=..., metadata=REQUIRED)``, are ``???``: Hydra reports them missing by dotted key."""
    node: dict[str, Any] = {"_target_": f"{cls.__module__}.{cls.__qualname__}"}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.metadata.get("required"):
            node[f.name] = "???"
        elif f.default is not dataclasses.MISSING:
            node[f.name] = _plain(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            node[f.name] = _plain(f.default_factory())
        else:
            node[f.name] = "???"
    return node


_registered = False


def schema_node(path: str, settings: bool = False) -> dict[str, Any]:
    """The stored node of the config class at ``path``: its defaults and ``_target_`` (the dataclass's
    own target, so a subclass registered under an alias keeps its class); the run settings without
    a target."""
    node = defaults_of(load_class(path))
    if settings:
        node.pop("_target_")
    else:
        node["_target_"] = path
    return node


def _lazy_node_class():
    """A ConfigStore entry built when Hydra first loads it: importing each config module and converting
    its defaults is paid for only the schemas a run's config names (a handful of ~60), which keeps
    ``--help`` and a bad value's one-line error quick."""
    from hydra.core.config_store import ConfigNode
    from omegaconf import OmegaConf

    class LazySchemaNode(ConfigNode):
        def __init__(self, name: str, group: str, path: str, settings: bool = False) -> None:
            self.name, self.group, self.package, self.provider = name, group, None, "modelxray"
            self._path, self._settings, self._node = path, settings, None

        @property
        def node(self):  # ConfigStore.load deep-copies it, so it is built once and never changed
            if self._node is None:
                self._node = OmegaConf.create(schema_node(self._path, self._settings))
            return self._node

        @node.setter
        def node(self, value) -> None:
            self._node = value

    return LazySchemaNode


def register_schema() -> None:
    """Store every schema node, each built on first use (idempotent; config modules import no torch)."""
    global _registered
    if _registered:
        return
    from hydra.core.config_store import ConfigStore

    lazy = _lazy_node_class()
    repo = ConfigStore.instance().repo.setdefault("schema", {})
    for group, options in SCHEMA.items():
        options_dir = repo.setdefault(group, {})
        for name, path in options.items():
            options_dir[f"{name}.yaml"] = lazy(f"{name}.yaml", f"schema/{group}", path)
    repo["settings.yaml"] = lazy("settings.yaml", "schema", SETTINGS, settings=True)
    _registered = True
