"""Untrained, seeded models for the learning-dynamics tasks; the project's training loop trains them.

``mlp`` (:class:`MLPSource`): on a modular task (``p`` set) the input pair (a, b) is one-hot
encoded and concatenated (2p features), then hidden layers (ReLU) and a linear read-out to the
classes, without biases by default: the grokking MLP of the issue (118 -> 512 -> 59 for p=59). The
first layer is computed as the sum of two columns of its weight (exactly the one-hot product,
without building the one-hot matrix). On feature inputs (``p`` null: digits) it is a plain MLP.

``grokking_transformer`` (:class:`GrokkingTransformerSource`): the one-layer transformer of Nanda et
al. 2023: tokens ``a, b, =`` (``=`` is token p), learned token and position embeddings, attention
with ``n_heads`` heads, a ReLU MLP of width ``d_mlp``, no LayerNorm, an unembedding to p classes
read at the last position. The last layer computes only the last position (its query attends to
all three keys; earlier layers, if ``n_layers`` > 1, run on every position with a causal mask), so
the logits equal those of the full causal forward at the last position at a third of the cost.

Both expose ``residue_embedding()`` ((p, d): the rows that embed residue a; None on features), which the feature
evolution callback reads for the Fourier sparsity.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from modelxray.core.errors import ConfigError
from modelxray.core.subject import LoadedModel, ModelInfo
from modelxray.models.base import ModelSource

if TYPE_CHECKING:
    from modelxray.models.grokking_nets import GrokkingTransformer, ModularMLP


@dataclass
class MLPSource(ModelSource):
    builds_with_transformers: ClassVar[bool] = False  # plain torch modules

    p: int | None = None  # modular task: the modulus (inputs one-hot a and b); null = feature input (digits)
    in_features: int = 64  # feature input only
    n_classes: int | None = None  # null = p
    hidden: list[int] = field(default_factory=lambda: [512])
    bias: bool = False
    seed: int = 0
    checkpoints: str | None = None  # a directory of step_<N>/model.safetensors: load the last, list all

    def validate(self) -> None:
        super().validate()
        _check_checkpoints(self.checkpoints)
        self.require_positive("p", "n_classes", allow_none=True)
        self.require_positive("in_features", "hidden")
        if self.p is None and self.n_classes is None:
            raise ConfigError("n_classes", "is required for a feature-input MLP (p is null)")

    def build(self) -> ModularMLP:
        from modelxray.models.grokking_nets import ModularMLP, seeded_init

        return seeded_init(
            ModularMLP(self.p, self.in_features, list(self.hidden), self.n_classes or self.p, self.bias), self.seed
        )

    def load(self) -> LoadedModel:
        model = self.build()
        inp = f"one-hot a, b (2 x {self.p})" if self.p else f"{self.in_features} features"
        note = (
            f"untrained (seed {self.seed}): {inp} -> {self.hidden} ReLU -> {self.n_classes or self.p}, bias={self.bias}"
        )
        info = ModelInfo(name="mlp", source_format="config", source_dtype="float32", notes=[note])
        return _with_checkpoints(LoadedModel(self.place(model), None, info, task="classification"), self.checkpoints)


@dataclass
class GrokkingTransformerSource(ModelSource):
    builds_with_transformers: ClassVar[bool] = False  # plain torch modules

    p: int = 113  # the modulus (the dataset's); vocabulary p + 1 with '='
    d_model: int = 128
    n_heads: int = 4
    d_head: int | None = None  # null = d_model / n_heads
    d_mlp: int = 512
    n_layers: int = 1
    mlp_bias: bool = True
    seed: int = 0
    checkpoints: str | None = None  # a directory of step_<N>/model.safetensors: load the last, list all

    def validate(self) -> None:
        super().validate()
        _check_checkpoints(self.checkpoints)
        self.require_positive("p", "d_model", "n_heads", "d_mlp", "n_layers")
        self.require_positive("d_head", allow_none=True)
        if self.d_head is None and self.d_model % self.n_heads:
            raise ConfigError("n_heads", f"must divide d_model={self.d_model} (or set d_head), got {self.n_heads}")

    def build(self) -> GrokkingTransformer:
        from modelxray.models.grokking_nets import GrokkingTransformer, seeded_init

        return seeded_init(
            GrokkingTransformer(
                self.p, self.d_model, self.n_heads, self.d_mlp, self.n_layers, self.d_head, self.mlp_bias
            ),
            self.seed,
        )

    def load(self) -> LoadedModel:
        model = self.build()
        note = (
            f"untrained (seed {self.seed}): {self.n_layers}-layer transformer, d={self.d_model}, {self.n_heads} heads, "
            f"MLP {self.d_mlp}, tokens a b = (p={self.p}); forward computes the last position only"
        )
        info = ModelInfo(name="grokking_transformer", source_format="config", source_dtype="float32", notes=[note])
        return _with_checkpoints(LoadedModel(self.place(model), None, info, task="classification"), self.checkpoints)


def _check_checkpoints(folder: str | None) -> None:
    if folder is not None:
        from modelxray.models.checkpoints import list_checkpoints

        list_checkpoints(folder, key="checkpoints")


def _with_checkpoints(loaded: LoadedModel, folder: str | None) -> LoadedModel:
    """With ``checkpoints``: the model holds the last checkpoint's weights and ``info.checkpoints``
    lists them all (the learning-dynamics analyzer walks them)."""
    if folder is None:
        return loaded
    from modelxray.models.checkpoints import list_checkpoints, load_weights

    found = list_checkpoints(folder)
    load_weights(loaded.model, found[-1][1])
    loaded.info.checkpoints = [str(p) for _, p in found]
    loaded.info.source_format = "safetensors"
    loaded.info.notes = [f"weights of the last of {len(found)} checkpoints in {folder} (step {found[-1][0]})"]
    return loaded
