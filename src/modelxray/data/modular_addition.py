"""Modular arithmetic (a op b mod p): the canonical grokking task (Power et al. 2022; Nanda et al. 2023).

All p² pairs (a, b) with 0 <= a, b < p; a seeded permutation puts ``train_fraction`` of them in the
train split and the rest in the test split. Inputs are int64 (N, 2) pairs, labels the result; a
model embeds the two residues itself (``model=mlp`` one-hot, ``model=grokking_transformer`` tokens).
``operation``: ``add`` (a + b), ``sub`` (a - b) or ``mul`` (a * b), all mod p. Offline, instant.
"""

from __future__ import annotations

from dataclasses import dataclass

from modelxray.core.configurable import Configurable
from modelxray.core.errors import ConfigError
from modelxray.data.base import ClassificationData

OPERATIONS = ("add", "sub", "mul")


@dataclass
class ModularArithmetic(Configurable):
    p: int = 59  # the modulus: residues 0..p-1 are the inputs and the classes
    operation: str = "add"  # add | sub | mul
    train_fraction: float = 0.5  # share of the p² pairs in the train split
    seed: int = 0  # the train/test split

    def validate(self) -> None:
        if self.p < 2:
            raise ConfigError("p", f"must be at least 2, got {self.p}")
        self.require_choice("operation", OPERATIONS)
        if not 0.0 < self.train_fraction < 1.0:
            raise ConfigError("train_fraction", f"must lie strictly between 0 and 1, got {self.train_fraction}")
        n_train = round(self.train_fraction * self.p**2)
        if n_train < 1 or n_train >= self.p**2:
            raise ConfigError(
                "train_fraction", f"leaves an empty split for p={self.p} ({n_train} of {self.p**2} pairs)"
            )

    @property
    def name(self) -> str:
        return "modular_addition" if self.operation == "add" else f"modular_{self.operation}"

    def load(self, tokenizer=None) -> ClassificationData:
        return modular_data(self.p, self.operation, self.train_fraction, self.seed)


def modular_data(p: int, operation: str = "add", train_fraction: float = 0.5, seed: int = 0) -> ClassificationData:
    """The seeded split of all (a, b) pairs; ``meta`` has ``p``, ``operation`` and the split's positions."""
    import torch

    a, b = torch.meshgrid(torch.arange(p), torch.arange(p), indexing="ij")
    x = torch.stack([a.flatten(), b.flatten()], dim=1)
    ops = {"add": x[:, 0] + x[:, 1], "sub": x[:, 0] - x[:, 1], "mul": x[:, 0] * x[:, 1]}
    y = ops[operation] % p
    perm = torch.randperm(p * p, generator=torch.Generator().manual_seed(seed))
    n = round(train_fraction * p * p)
    tr, te = perm[:n], perm[n:]
    name = "modular_addition" if operation == "add" else f"modular_{operation}"
    return ClassificationData(
        name,
        x[tr],
        y[tr],
        x[te],
        y[te],
        n_classes=p,
        feature_range=(0.0, float(p - 1)),
        input_shape=(2,),
        meta={"p": p, "operation": operation, "train_pairs": tr, "test_pairs": te},
    )
