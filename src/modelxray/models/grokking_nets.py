"""The grokking architectures (``model=mlp``, ``model=grokking_transformer``), built by their sources
in ``modelxray.models.grokking``; kept apart so that importing the configs imports no torch."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


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
