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

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from modelxray.core.errors import ConfigError
from modelxray.core.subject import LoadedModel, ModelInfo
from modelxray.models.base import ModelSource


def seeded_init(model: nn.Module, seed: int) -> nn.Module:
    """Re-initialise every module with a fixed seed, independent of the global RNG state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for m in model.modules():
            if hasattr(m, "reset_parameters"):
                m.reset_parameters()
        if hasattr(model, "init_weights"):  # a model's own scheme, after its modules' defaults
            model.init_weights()
    return model


class ModularMLP(nn.Module):
    """One-hot(a) ++ one-hot(b) -> [Linear -> ReLU] x len(hidden) -> Linear, or a plain MLP on features."""

    def __init__(self, p: int | None, in_features: int, hidden: list[int], n_classes: int, bias: bool = False):
        super().__init__()
        self.p = p
        width = 2 * p if p is not None else in_features
        layers: list[tuple[str, nn.Module]] = []
        for i, h in enumerate(hidden, 1):
            layers += [(f"fc{i}", nn.Linear(width, h, bias=bias)), (f"relu{i}", nn.ReLU())]
            width = h
        self.hidden = nn.ModuleDict(layers)
        self.out = nn.Linear(width, n_classes, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        modules = iter(self.hidden.values())
        if self.p is not None:
            first = next(modules)  # fc1 on the one-hot pair, as a sum of two weight columns
            w = first.weight.t()  # (2p, h)
            h = F.embedding(x[..., 0].long(), w) + F.embedding(x[..., 1].long() + self.p, w)
            if first.bias is not None:
                h = h + first.bias
        else:
            h = x.flatten(1) if x.dim() > 2 else x
        for m in modules:
            h = m(h)
        return self.out(h)

    def residue_embedding(self) -> torch.Tensor | None:
        """(p, hidden): the first layer's weights on one-hot(a); None for a feature-input MLP."""
        if self.p is None:
            return None
        return self.hidden["fc1"].weight[:, : self.p].t()


@dataclass
class MLPSource(ModelSource):
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


class _Attention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_head: int):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_head
        self.q = nn.Linear(d_model, n_heads * d_head, bias=False)
        self.k = nn.Linear(d_model, n_heads * d_head, bias=False)
        self.v = nn.Linear(d_model, n_heads * d_head, bias=False)
        self.o = nn.Linear(n_heads * d_head, d_model, bias=False)

    def forward(self, h: torch.Tensor, last_only: bool) -> torch.Tensor:
        b, t, _ = h.shape
        split = lambda z: z.view(b, -1, self.n_heads, self.d_head).transpose(1, 2)  # noqa: E731
        q = split(self.q(h[:, -1:] if last_only else h))
        k, v = split(self.k(h)), split(self.v(h))
        att = q @ k.transpose(-1, -2) / math.sqrt(self.d_head)
        if not last_only:
            att = att.masked_fill(torch.ones(t, t, dtype=torch.bool, device=h.device).triu(1), float("-inf"))
        out = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, -1, self.n_heads * self.d_head)
        return self.o(out)


class _Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_head: int, d_mlp: int, mlp_bias: bool):
        super().__init__()
        self.attn = _Attention(d_model, n_heads, d_head)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, d_mlp, bias=mlp_bias), nn.ReLU(), nn.Linear(d_mlp, d_model, bias=mlp_bias)
        )

    def forward(self, h: torch.Tensor, last_only: bool) -> torch.Tensor:
        a = self.attn(h, last_only)
        h = (h[:, -1:] if last_only else h) + a
        return h + self.mlp(h)


class GrokkingTransformer(nn.Module):
    """Tokens (a, b, =) -> n_layers blocks (no LayerNorm) -> logits over p residues at the last position."""

    def __init__(
        self,
        p: int,
        d_model: int = 128,
        n_heads: int = 4,
        d_mlp: int = 512,
        n_layers: int = 1,
        d_head: int | None = None,
        mlp_bias: bool = True,
    ):
        super().__init__()
        self.p = p
        d_head = d_head or d_model // n_heads
        self.embed = nn.Embedding(p + 1, d_model)  # residues 0..p-1 and '=' (p)
        self.pos = nn.Embedding(3, d_model)
        self.blocks = nn.ModuleList(_Block(d_model, n_heads, d_head, d_mlp, mlp_bias) for _ in range(n_layers))
        self.unembed = nn.Linear(d_model, p, bias=False)
        self.register_buffer("eq", torch.tensor([p]), persistent=False)

    def init_weights(self) -> None:
        """Nanda et al.'s initialisation: every weight ~ N(0, 1/fan_in) (embeddings and positions
        N(0, 1/d_model), the unembedding N(0, 1/(p+1))), biases 0. PyTorch's defaults are ~1.7x
        smaller for linear layers and N(0, 1) for embeddings, which changes when grokking happens."""
        d = self.embed.embedding_dim
        nn.init.normal_(self.embed.weight, std=1 / math.sqrt(d))
        nn.init.normal_(self.pos.weight, std=1 / math.sqrt(d))
        for name, m in self.named_modules():
            if isinstance(m, nn.Linear):
                fan_in = self.p + 1 if m is self.unembed else m.in_features
                nn.init.normal_(m.weight, std=1 / math.sqrt(fan_in))
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.long()
        tokens = torch.cat([x[..., :2], self.eq.expand(*x.shape[:-1], 1)], dim=-1)
        h = self.embed(tokens) + self.pos.weight
        batched = h.dim() == 3
        if not batched:  # a single example (per-example gradients under vmap)
            h = h[None]
        for i, block in enumerate(self.blocks):
            h = block(h, last_only=i == len(self.blocks) - 1)
        logits = self.unembed(h[:, -1])
        return logits if batched else logits[0]

    def residue_embedding(self) -> torch.Tensor:
        return self.embed.weight[: self.p]


@dataclass
class GrokkingTransformerSource(ModelSource):
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
