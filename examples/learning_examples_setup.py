"""What the learning-dynamics examples share: the datasets and DataLoaders, the models they train,
and the working directory their code writes into (``./results``, ``./analysis``...).

Not an example itself (``scripts/run_examples.py`` skips ``*_setup.py``): the
``examples/learning_dynamics_*.py`` scripts and ``examples/lightning_callbacks.py`` import it.

- digits: scikit-learn's 1,347 training and 450 test 8x8 images, 10 classes (offline);
- the grokking task: a + b mod 23 over all pairs, 80% of them for training, the MLP of
  ``model=mlp`` (one-hot a and b, 256 hidden units, no biases); full-batch AdamW with weight decay
  1.0 makes test accuracy jump long after train accuracy (about epoch 2,700).

The training loaders do not shuffle: the examples compute each batch's dataset positions as
``batch_idx * batch_size ...``, which holds only for a loader that yields the dataset in order.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from modelxray.data.digits import load_digits_split
from modelxray.data.digits_variants import DigitsNoisy
from modelxray.data.modular_addition import modular_data

torch.set_num_threads(1)  # small matrices: a second thread only adds contention on 2 shared cores


def digits_datasets(noise: float = 0.0) -> tuple[TensorDataset, TensorDataset]:
    """Train and test splits of digits as ``(pixels (64,), label)`` datasets; ``noise``: share of
    training labels flipped to another class (``dataset=digits_noisy``), the memorization setting."""
    data = DigitsNoisy(noise=noise).load() if noise else load_digits_split()
    return TensorDataset(data.x_train, data.y_train), TensorDataset(data.x_test, data.y_test)


def loaders(train_dataset, test_dataset, batch_size: int) -> tuple[DataLoader, DataLoader]:
    return DataLoader(train_dataset, batch_size=batch_size, shuffle=False), DataLoader(test_dataset, batch_size=256)


def digits_mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


class YourModel(nn.Module):
    """A small CNN on the 8x8 digits whose blocks carry ResNet's names (``layer1`` .. ``layer4``),
    so ``layer_names=['layer3', 'layer4']`` name real layers."""

    def __init__(self):
        super().__init__()
        self.layer1 = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU())
        self.layer2 = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.layer3 = nn.Sequential(nn.Flatten(), nn.Linear(16 * 4 * 4, 64), nn.ReLU())
        self.layer4 = nn.Sequential(nn.Linear(64, 32), nn.ReLU())
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(-1, 1, 8, 8)
        return self.fc(self.layer4(self.layer3(self.layer2(self.layer1(x)))))


def grokking_datasets(p: int = 23) -> tuple[TensorDataset, TensorDataset]:
    data = modular_data(p, "add", train_fraction=0.8, seed=0)
    return TensorDataset(data.x_train, data.y_train), TensorDataset(data.x_test, data.y_test)


def grokking_model(p: int = 23) -> nn.Module:
    from modelxray.models.grokking import MLPSource

    return MLPSource(p=p, hidden=[256], seed=0, device="cpu").load().model


def grokking_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1.0, betas=(0.9, 0.98))


@contextlib.contextmanager
def working_directory(description: str):
    """Run in ``--out DIR`` (kept) or a temporary directory (removed): the examples' relative paths
    (``./results``, ``./checkpoints``) land there."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", help="directory to write results into (default: a temporary one)")
    args = parser.parse_args()
    before = Path.cwd()
    with contextlib.ExitStack() as stack:
        out = Path(args.out) if args.out else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        out.mkdir(parents=True, exist_ok=True)
        os.chdir(out)
        try:
            yield out
        finally:
            os.chdir(before)


def check_plots(paths: dict, *names: str) -> None:
    """Each named plot was written and is a non-empty PNG."""
    for name in names:
        assert name in paths, (name, sorted(paths))
        data = Path(paths[name]).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 1000, name
