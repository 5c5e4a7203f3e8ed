"""``LearningDynamicsAnalyzer`` in your own training loop, in its smallest form: per-example
forgetting and dataset cartography from one call per batch and one per epoch.

    python examples/learning_dynamics_minimal.py [--out DIR]

A 64-64-10 MLP trains on scikit-learn's digits for 15 epochs (Adam, batches of 64; a few seconds
on 2 cores). ``track_batch`` records every batch's per-example loss and correctness at their
dataset positions (one no-grad forward of the batch), ``compute_epoch_statistics`` closes the
epoch, ``analyze_learning_patterns`` and ``plot_learning_dynamics`` report. The asserts check the
analysis keys, hard examples as dataset positions, the plots in ./results, finite statistics.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
from learning_examples_setup import check_plots, digits_datasets, digits_mlp, loaders, working_directory

from modelxray.learning_dynamics import LearningDynamicsAnalyzer

num_epochs = 15
batch_size = 64


def main() -> None:
    train_dataset, test_dataset = digits_datasets()
    train_loader, _ = loaders(train_dataset, test_dataset, batch_size)
    model = digits_mlp()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)

    # ---- learning dynamics in the training loop ---------------------------------------------------
    # Initialize analyzer
    analyzer = LearningDynamicsAnalyzer(num_classes=10)

    # In your training loop
    for epoch in range(num_epochs):
        for batch_idx, (inputs, targets) in enumerate(train_loader):
            # Your training code here
            outputs = model(inputs)
            loss = criterion(outputs, targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

            # Track learning dynamics
            batch_indices = torch.arange(batch_idx * batch_size, min((batch_idx + 1) * batch_size, len(train_dataset)))
            analyzer.track_batch(model, inputs, targets, batch_indices, epoch)

        # Compute statistics at end of epoch
        analyzer.compute_epoch_statistics(train_loader, model, epoch)

    # Analyze and visualize
    analysis = analyzer.analyze_learning_patterns()
    plots = analyzer.plot_learning_dynamics(save_dir="./results")
    print(f"Hard examples: {len(analysis['hard_examples'])}")
    # ---- checks ----------------------------------------------------------------------------------

    n_tracked = min(1000, len(train_dataset))  # the default track_examples: the first 1,000 positions
    assert analysis["total_examples_tracked"] == n_tracked and analysis["epochs_recorded"] == num_epochs
    regions = analysis["hard_examples"] + analysis["ambiguous_examples"] + analysis["easy_examples"]
    assert sorted(regions) == list(range(n_tracked))  # every tracked example in exactly one region
    f = analysis["forgetting_statistics"]
    assert {"mean", "std", "max", "examples_with_forgetting"} <= set(f)
    assert 0 <= f["examples_with_forgetting"] <= n_tracked and f["total_events"] >= f["examples_with_forgetting"]
    for v in analysis["confidence_statistics"].values():
        assert math.isfinite(v) and 0.0 <= v <= 1.0
    last = analyzer.epoch_stats[-1]
    assert last["epoch"] == num_epochs - 1 and last["accuracy"] > 0.9 and math.isfinite(last["avg_loss"])
    assert set(last["class_accuracies"]) == set(range(10))
    check_plots(plots, "cartography_map.png", "forgetting_histogram.png", "learning_curves_by_region.png")
    print(
        f"Forgetting events: {f['total_events']} in {f['examples_with_forgetting']} examples; "
        f"final train accuracy of the tracked examples {last['accuracy']:.3f}"
    )
    print("all checks passed")


if __name__ == "__main__":
    with working_directory(__doc__):
        main()
