"""The learning callbacks' configs (the ``train.learning.<section>`` keys), kept apart from the
callbacks so that validating a training config imports neither numpy nor torch. A config names its
callback, which ``build()`` imports."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from modelxray.core.callbacks import Callback
from modelxray.core.configurable import Configurable
from modelxray.core.errors import ConfigError

if TYPE_CHECKING:
    from modelxray.learning_dynamics.cartography import RegionThresholds


class CallbackConfig(Configurable):
    """Base of the callbacks' configs: ``build()`` gives the callback it describes (Hydra can target
    the config, which checks unknown keys)."""

    callback_class: ClassVar[str] = ""  # "module.Class" of the callback

    def build(self) -> Callback:
        module, _, name = self.callback_class.rpartition(".")
        return getattr(importlib.import_module(module), name)(self)


@dataclass
class ExampleDynamicsConfig(CallbackConfig):
    callback_class: ClassVar[str] = "modelxray.learning_dynamics.callbacks.examples.ExampleDynamicsCallback"

    track_examples: int | None = 1000  # at most this many training examples (null = all)
    selection: str = "first"  # first | random: which ones (random is seeded)
    seed: int = 0
    every_n_epochs: int = 1  # record every N-th epoch (1 = every epoch; steps of other epochs cost nothing)
    log_every_n_epochs: int = 1  # return the live metrics every N-th recorded epoch (full-batch runs: 10)
    keep_history: bool = True  # keep the (examples, epochs) matrices: curves by region, exact std
    ambiguous_top_share: float | None = 0.33  # cartography: the most variable share is ambiguous (null: a fixed cut)
    ambiguous_variability: float = 0.2  # the fixed cut when ambiguous_top_share is null: variability >= this
    easy_confidence: float = 0.5  # cartography: else confidence >= this is easy, below is hard
    n_hard: int = 20  # rows of the hard-examples table

    def validate(self) -> None:
        self.require_positive("track_examples", allow_none=True)
        self.require_positive("every_n_epochs", "log_every_n_epochs", "n_hard")
        self.require_choice("selection", ("first", "random"))
        if not 0.0 < self.ambiguous_variability <= 0.5:
            raise ConfigError("ambiguous_variability", f"must lie in (0, 0.5], got {self.ambiguous_variability}")
        if self.ambiguous_top_share is not None and not 0.0 <= self.ambiguous_top_share <= 1.0:
            raise ConfigError("ambiguous_top_share", f"must lie in [0, 1] or be null, got {self.ambiguous_top_share}")
        if not 0.0 < self.easy_confidence < 1.0:
            raise ConfigError("easy_confidence", f"must lie in (0, 1), got {self.easy_confidence}")

    @property
    def thresholds(self) -> RegionThresholds:
        from modelxray.learning_dynamics.cartography import RegionThresholds

        return RegionThresholds(self.ambiguous_variability, self.easy_confidence, self.ambiguous_top_share)


@dataclass
class GradientFlowConfig(CallbackConfig):
    callback_class: ClassVar[str] = "modelxray.learning_dynamics.callbacks.gradient_flow.GradientFlowCallback"

    every_n_steps: int = 1
    layers: list[str] = field(default_factory=list)  # glob patterns of layer names; empty = every layer
    vanishing: float = 1e-7  # a layer's gradient norm below this is vanishing at that step
    exploding: float = 1e3  # above this, exploding
    flag_share: float = 0.5  # flag a layer in the report when that happens in this share of measured steps
    log_layers: bool = True  # log grad_flow/layer_<name>/norm (else only the aggregates)

    def validate(self) -> None:
        self.require_positive("every_n_steps", "vanishing", "exploding", "flag_share")


@dataclass
class MemorizationConfig(CallbackConfig):
    callback_class: ClassVar[str] = "modelxray.learning_dynamics.callbacks.memorization.MemorizationCallback"

    every_n_epochs: int = 1  # evaluate every N-th epoch (a full no-grad pass over both splits)
    max_train_eval: int | None = None  # evaluate the first N training examples (null = all)
    max_test_eval: int | None = None  # evaluate the first N test examples (null = all)
    batch_size: int = 4096
    gap_open: float = 0.1  # the accuracy gap "opens" at the first evaluation >= this
    gap_close: float = 0.05  # ... and "closes" when it stays <= this to the end
    transition_level: float = 0.95  # transition step = first step accuracy >= this and stays
    change_points: bool = True  # detect change points in the accuracy and gap series (report)
    change_point_method: str = "binseg"  # binseg | pelt (ruptures)
    min_gain: float = 0.05  # a change point must explain this share of the series' variance

    def validate(self) -> None:
        self.require_positive("every_n_epochs", "batch_size")
        self.require_positive("max_train_eval", "max_test_eval", allow_none=True)
        self.require_choice("change_point_method", ("binseg", "pelt"))


@dataclass
class FeatureEvolutionConfig(CallbackConfig):
    callback_class: ClassVar[str] = "modelxray.learning_dynamics.callbacks.features.FeatureEvolutionCallback"

    layers: list[str] = field(default_factory=list)  # module names; empty = the penultimate representation
    every_n_epochs: int = 10
    sample_size: int = 256  # fixed examples the activations are taken on
    sample_split: str = "test"  # test | train
    seed: int = 0  # which examples, and the probe's split
    silhouette: bool = True
    probe: bool = True
    probe_test_fraction: float = 0.3
    probe_max_dim: int | None = 64  # PCA to this many dimensions before the probe (null = never)
    cka: bool = True
    pca: bool = True
    pca_snapshots: int = 6  # snapshots whose 2-D PCA coordinates go to the report
    projection: str = "pca"  # pca | tsne: how each snapshot's activations are drawn in 2-D (t-SNE: scikit-learn, about a second per snapshot)
    fourier: bool = True  # Fourier sparsity + weight norm for modular tasks
    fourier_top_k: int = 5
    embedding_param: str | None = None  # a (p, d) parameter to use when the model has no residue_embedding()
    max_stored_snapshots: int = 200  # activations kept for CKA to the final snapshot

    def validate(self) -> None:
        self.require_positive("every_n_epochs", "sample_size", "fourier_top_k", "max_stored_snapshots", "pca_snapshots")
        self.require_positive("probe_max_dim", allow_none=True)
        self.require_choice("sample_split", ("test", "train"))
        self.require_choice("projection", ("pca", "tsne"))


@dataclass
class TransitionAttributionConfig(CallbackConfig):
    callback_class: ClassVar[str] = "modelxray.learning_dynamics.callbacks.attribution.TransitionAttributionCallback"

    every_n_steps: int = 100  # checkpoint frequency
    start_step: int | None = None  # first step to checkpoint (null = from the start)
    end_step: int | None = None  # last step to checkpoint (null = to the end)
    max_checkpoints: int = 20
    target: str = "learned"  # learned | test
    max_target: int = 512  # at most this many target examples
    max_train: int | None = None  # score the first N training examples (null = all)
    top_k: int = 10
    chunk_size: int = 256  # per-example gradients computed this many at a time

    def validate(self) -> None:
        self.require_positive("every_n_steps", "max_checkpoints", "max_target", "top_k", "chunk_size")
        self.require_positive("max_train", allow_none=True)
        self.require_choice("target", ("learned", "test"))
