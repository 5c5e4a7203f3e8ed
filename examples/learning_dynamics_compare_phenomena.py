"""Learning dynamics of three training runs compared: grokking, a spurious shortcut and normal
learning, each recorded by a ``LearningDynamicsAnalyzer``, saved, loaded back and compared.

    python examples/learning_dynamics_compare_phenomena.py [--out DIR]

The three ``train_*_model`` functions each train with a ``LearningDynamicsAnalyzer`` in the loop and
save it under ./saved with ``analyzer.save(...)`` (JSON + npz, no pickle):

- grokking: a + b mod 23, the grokking MLP, full-batch AdamW with weight decay 1.0, 3,000 epochs
  (train accuracy is perfect within ~150 epochs, test accuracy jumps past 95% near epoch 2,700);
  its loop passes the logits it already has (``outputs=``), so tracking costs no second forward;
- bias: digits with a marker pixel that names the label in 95% of the training images
  (``dataset=digits_spurious``), a 64-64-10 MLP, 15 epochs;
- normal: clean digits, the same MLP, 15 epochs.

Then ``LearningDynamicsAnalyzer.load`` reads the three analyzers back and their hard examples and
forgetting events are compared. The asserts check the analysis keys, that a loaded analyzer gives
the analysis it gave before saving, and finite values.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from learning_examples_setup import (
    digits_datasets,
    digits_mlp,
    grokking_datasets,
    grokking_model,
    grokking_optimizer,
    loaders,
    working_directory,
)
from torch.utils.data import DataLoader, TensorDataset

from modelxray.data.digits_variants import DigitsSpurious
from modelxray.learning_dynamics import LearningDynamicsAnalyzer

before_saving: dict[str, dict] = {}  # each analysis as computed in the training process


def _save(name: str, analyzer: LearningDynamicsAnalyzer) -> None:
    before_saving[name] = analyzer.analyze_learning_patterns()
    analyzer.save(f"./saved/{name}_analyzer.pkl")


def _train_digits(name: str, train_dataset, test_dataset, epochs: int = 15, batch_size: int = 64):
    train_loader, test_loader = loaders(train_dataset, test_dataset, batch_size)
    model = digits_mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    analyzer = LearningDynamicsAnalyzer(num_classes=10)
    for epoch in range(epochs):
        for batch_idx, (inputs, targets) in enumerate(train_loader):
            loss = F.cross_entropy(model(inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            batch_indices = torch.arange(batch_idx * batch_size, batch_idx * batch_size + len(targets))
            analyzer.track_batch(model, inputs, targets, batch_indices, epoch)
        analyzer.compute_epoch_statistics(train_loader, model, epoch)
    _save(name, analyzer)
    return model, train_loader, test_loader


def train_grokking_model(epochs: int = 3000):
    train_dataset, test_dataset = grokking_datasets(p=23)
    train_loader = DataLoader(train_dataset, batch_size=len(train_dataset))
    test_loader = DataLoader(test_dataset, batch_size=len(test_dataset))
    model, everything = grokking_model(p=23), torch.arange(len(train_dataset))
    optimizer = grokking_optimizer(model)
    analyzer = LearningDynamicsAnalyzer(num_classes=23)
    inputs, targets = train_dataset.tensors  # full batch: one step per epoch, on the whole training set
    for epoch in range(epochs):
        outputs = model(inputs)
        loss = F.cross_entropy(outputs, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        analyzer.track_batch(model, inputs, targets, everything, epoch, outputs=outputs)
        analyzer.compute_epoch_statistics(train_loader, model, epoch)
    _save("grokking", analyzer)
    with torch.no_grad():
        x, y = test_dataset.tensors
        print(f"grokking: test accuracy after {epochs} epochs {float((model(x).argmax(1) == y).float().mean()):.3f}")
    return model, train_loader, test_loader


def train_biased_model():
    data = DigitsSpurious(train_correlation=0.95, test_correlation=0.0).load()
    return _train_digits("bias", TensorDataset(data.x_train, data.y_train), TensorDataset(data.x_test, data.y_test))


def train_normal_model():
    return _train_digits("normal", *digits_datasets())


def main() -> None:
    # ---- train, load the saved analyzers, compare ---------------------------------------------------
    # Train multiple models
    models = {"grokking": train_grokking_model(), "bias": train_biased_model(), "normal": train_normal_model()}

    # Analyze each
    analyses = {}

    for name, (model, train_loader, test_loader) in models.items():
        analyzer = LearningDynamicsAnalyzer(num_classes=10)

        # Assume models are already trained with tracking
        # Load saved analyzer state
        analyzer = LearningDynamicsAnalyzer.load(f"./saved/{name}_analyzer.pkl")

        analyses[name] = analyzer.analyze_learning_patterns()

    # Compare
    for name, analysis in analyses.items():
        print(f"\n{name}:")
        print(f"  Hard examples: {len(analysis['hard_examples'])}")
        print(f"  Forgetting events: {analysis['forgetting_statistics']['examples_with_forgetting']}")
    # ---- checks ----------------------------------------------------------------------------------

    for name, analysis in analyses.items():
        assert analysis.keys() == before_saving[name].keys()
        for key in ("hard_examples", "ambiguous_examples", "easy_examples", "forgetting_statistics", "metrics"):
            assert analysis[key] == before_saving[name][key], (name, key)  # the same after save and load
        assert all(math.isfinite(v) for v in analysis["confidence_statistics"].values())
    assert analyses["grokking"]["epochs_recorded"] == 3000 and analyses["normal"]["epochs_recorded"] == 15
    assert analyses["grokking"]["total_examples_tracked"] == 423  # 80% of the 23 x 23 pairs
    print("all checks passed")


if __name__ == "__main__":
    with working_directory(__doc__):
        main()
