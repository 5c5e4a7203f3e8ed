"""``train=`` configs: how the one training loop trains (``conf/train/*.yaml``).

``train=none`` (the default) trains nothing; any other preset fine-tunes the loaded model before the
quantizer and the analyzers see it. Every knob is a key here with a default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from modelxray.core.configurable import Configurable
from modelxray.core.errors import ConfigError, require_library
from modelxray.training.presentation import TrainPresentation
from modelxray.training_dynamics.config import DynamicsConfig, section, train_dynamics_defaults


@dataclass
class NoTraining(Configurable):
    """``train=none``: analyze the model as loaded."""

    enabled: bool = False

    def validate(self) -> None:
        if self.enabled:
            raise ConfigError("enabled", "train=none trains nothing; pick a preset, e.g. train=finetune_lm")


@dataclass
class LoraConfig(Configurable):
    enabled: bool = False
    r: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: list[str] | None = None  # null: q_proj, v_proj (Llama family) or c_attn (GPT-2)
    merge: bool = True  # merge the adapters into the weights after training (analyzers see one model)

    def validate(self) -> None:
        self.require_positive("r", "alpha")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError("dropout", f"must lie in [0, 1), got {self.dropout}")
        if self.enabled:
            require_library("enabled", "LoRA", "peft", "peft", "lora")


_LEARNING = {  # train.learning.<key> -> (config class, callback class) in modelxray.learning_dynamics.callbacks
    "examples": ("ExampleDynamicsConfig", "ExampleDynamicsCallback"),
    "grad_flow": ("GradientFlowConfig", "GradientFlowCallback"),
    "memorization": ("MemorizationConfig", "MemorizationCallback"),
    "features": ("FeatureEvolutionConfig", "FeatureEvolutionCallback"),
    "attribution": ("TransitionAttributionConfig", "TransitionAttributionCallback"),
}


@dataclass
class LearningConfig(Configurable):
    """Learning-dynamics callbacks (``modelxray.learning_dynamics``) to run during training; each section is
    that callback's config keys plus ``enabled``, or null (off)."""

    examples: Any = None  # forgetting events and dataset cartography
    grad_flow: Any = None  # per-layer gradient norms over time, vanishing/exploding flags
    memorization: Any = None  # train/test gap, fitted flipped labels, transition steps, change points
    features: Any = None  # activations, PCA, silhouette, linear probe, CKA, Fourier sparsity
    attribution: Any = None  # TracIn attribution of a transition to training examples

    def validate(self) -> None:
        from modelxray.learning_dynamics import callbacks as lc

        for key, (cfg_name, _) in _LEARNING.items():
            value = getattr(self, key)
            if value is None or value is False:
                setattr(self, key, None)
                continue
            if not isinstance(value, dict):
                raise ConfigError(key, f"expected a mapping of {cfg_name} keys or null, got {value!r}")
            value = dict(value)
            if not value.pop("enabled", True):
                setattr(self, key, None)
                continue
            setattr(self, key, section(getattr(lc, cfg_name), value, key))

    def callbacks(self) -> list:
        from modelxray.learning_dynamics import callbacks as lc

        return [
            getattr(lc, cb_name)(getattr(self, key))
            for key, (_, cb_name) in _LEARNING.items()
            if getattr(self, key) is not None
        ]


@dataclass
class TrainConfig(TrainPresentation, Configurable):
    enabled: bool = True
    task: str = "auto"  # auto (from the model) | causal_lm | classification
    steps: int = 50  # optimizer steps
    optimizer: str = "adamw"  # adamw | adam | sgd
    lr: float = 1e-5
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    momentum: float = 0.0  # sgd
    schedule: str = "constant"  # constant | linear | cosine (after warm-up)
    warmup_steps: int = 0
    batch_size: int | None = 4  # rows per micro-batch; null = the whole training set (classifiers)
    seq_len: int = 256  # tokens per training row (language models)
    grad_accum: int = 1  # micro-batches per optimizer step
    max_grad_norm: float | None = 1.0  # clip the global gradient norm; null = no clipping
    seed: int = 0  # initialisation of LoRA, data order, dropout
    interval: int = 10  # the dynamics monitor measures every N optimizer steps
    log_every: int = 1  # train/loss and train/lr every N steps
    eval_every: int | None = None  # held-out evaluation every N steps (null: before and after only)
    eval_batches: int = 2  # batches of held-out data per evaluation (language models)
    checkpoint_every: int | None = None  # save a checkpoint every N steps (safetensors); null = none
    checkpoint_dir: str | None = None  # null: <run output dir>/checkpoints
    log_checkpoints: bool = False  # also upload checkpoints to the tracker as artifacts (large)
    lora: Any = field(default_factory=LoraConfig)  # LoRA adapters (peft) instead of every weight: lora.enabled=true
    dynamics: Any = field(default_factory=train_dynamics_defaults)  # the monitor's sections (interval: train.interval)
    learning: Any = None  # LearningConfig sections (classifiers: forgetting, cartography, features ...)

    def validate(self) -> None:
        self.require_choice("task", ["auto", "causal_lm", "classification"])
        self.require_choice("optimizer", ["adamw", "adam", "sgd"])
        self.require_choice("schedule", ["constant", "linear", "cosine"])
        self.require_positive("steps", "lr", "seq_len", "grad_accum", "interval", "log_every", "eval_batches", "eps")
        self.require_positive("batch_size", "eval_every", "checkpoint_every", "max_grad_norm", allow_none=True)
        self.require_non_negative("weight_decay", "warmup_steps", "momentum")
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ConfigError("betas", f"must be two numbers in [0, 1), got {self.betas}")
        self.lora = section(LoraConfig, self.lora, "lora")
        dyn = dict(self.dynamics or {}) if not isinstance(self.dynamics, DynamicsConfig) else self.dynamics
        if isinstance(dyn, dict):
            if "interval" in dyn:
                raise ConfigError("dynamics.interval", "set train.interval instead (one interval for the run)")
            dyn = section(DynamicsConfig, {**dyn, "interval": self.interval}, "dynamics")
        self.dynamics = dyn
        self.learning = section(LearningConfig, self.learning, "learning")
