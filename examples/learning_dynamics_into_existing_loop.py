"""Adding ``LearningDynamicsAnalyzer`` to a training loop you already have (before and after), and
what to do when tracking costs too much memory or time, or hooks conflict.

    python examples/learning_dynamics_into_existing_loop.py [--out DIR]

The existing code is a digits MLP trained for 10 epochs (batches of 64). The "after" version adds
three calls: the analyzer, ``track_batch`` per batch, ``compute_epoch_statistics`` per epoch (and
the plots at the end). Then the variants: short of memory, track 500 examples and gradients every
20th batch (``GradientFlowAnalyzer``); slow training, switch to eval mode around ``track_batch``,
or pass the logits the loop already computed (``track_batch(..., outputs=outputs)``: no second
forward); hook conflicts, remove one ``FeatureEvolutionTracker``'s hooks before creating another,
or reuse one tracker. The asserts check the plots in ./results, the analysis keys, and that the
eval-mode switch changes nothing (the forward of ``track_batch`` runs in eval mode either way).
The import is ``from modelxray.learning_dynamics import ...``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
from learning_examples_setup import check_plots, digits_datasets, digits_mlp, loaders, working_directory

from modelxray.learning_dynamics import FeatureEvolutionTracker, GradientFlowAnalyzer, LearningDynamicsAnalyzer

num_epochs = 10
batch_size = 64
train_dataset, test_dataset = digits_datasets()
train_loader, test_loader = loaders(train_dataset, test_dataset, batch_size)
criterion = nn.CrossEntropyLoss()


def fresh():
    model = digits_mlp()
    return model, torch.optim.Adam(model.parameters(), lr=3e-3)


def before() -> None:
    model, optimizer = fresh()
    # BEFORE: Your existing training code
    for epoch in range(num_epochs):
        for batch_idx, (inputs, targets) in enumerate(train_loader):
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = criterion(outputs, targets)
            loss.backward()
            optimizer.step()


def after():
    model, optimizer = fresh()
    # AFTER: With analysis integrated
    analyzer = LearningDynamicsAnalyzer(num_classes=10)  # ADD THIS

    for epoch in range(num_epochs):
        for batch_idx, (inputs, targets) in enumerate(train_loader):
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = criterion(outputs, targets)
            loss.backward()
            optimizer.step()

            # ADD THIS
            batch_indices = torch.arange(batch_idx * batch_size, min((batch_idx + 1) * batch_size, len(train_dataset)))
            analyzer.track_batch(model, inputs, targets, batch_indices, epoch)

        analyzer.compute_epoch_statistics(train_loader, model, epoch)  # ADD THIS

    # ADD THIS
    analyzer.plot_learning_dynamics(save_dir="./results")
    return analyzer


def out_of_memory():
    """Short of memory: fewer tracked examples, gradients every 20th batch."""
    model, optimizer = fresh()
    # Reduce tracked examples
    analyzer = LearningDynamicsAnalyzer(track_examples=500)  # Instead of 1000
    gradients = GradientFlowAnalyzer(model=model)
    for epoch in range(num_epochs):
        for batch_idx, (inputs, targets) in enumerate(train_loader):
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = criterion(outputs, targets)
            loss.backward()
            # Track gradients less frequently
            if batch_idx % 20 == 0:  # Instead of every batch
                gradients.track_batch_gradients(loss, epoch, batch_idx)
            optimizer.step()
            batch_indices = torch.arange(batch_idx * batch_size, batch_idx * batch_size + len(targets))
            analyzer.track_batch(model, inputs, targets, batch_indices, epoch)
        analyzer.compute_epoch_statistics(train_loader, model, epoch)
    return analyzer, gradients


def slow_training(with_outputs: bool = False):
    """Slow training: eval mode around track_batch (or the loop's own logits)."""
    model, optimizer = fresh()
    analyzer = LearningDynamicsAnalyzer(num_classes=10)
    for epoch in range(num_epochs):
        for batch_idx, (inputs, targets) in enumerate(train_loader):
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = criterion(outputs, targets)
            loss.backward()
            optimizer.step()
            batch_indices = torch.arange(batch_idx * batch_size, batch_idx * batch_size + len(targets))
            if with_outputs:  # the logits of this step's forward: nothing computed twice
                analyzer.track_batch(model, inputs, targets, batch_indices, epoch, outputs=outputs)
                continue
            # Use eval mode for tracking
            model.eval()
            analyzer.track_batch(model, inputs, targets, batch_indices, epoch)
            model.train()  # Return to training mode
        analyzer.compute_epoch_statistics(train_loader, model, epoch)
    return analyzer


def hook_conflicts():
    """Hook conflicts: one tracker per model."""
    model, _ = fresh()
    tracker1 = FeatureEvolutionTracker(model, layer_names=["1"])
    tracker1.track_epoch(train_loader, 0, sample_limit=300)
    # Remove hooks before creating new tracker
    tracker1.remove_hooks()

    # Or reuse the same tracker
    tracker = FeatureEvolutionTracker(model, layer_names=["1"])
    tracker.track_epoch(train_loader, 0, sample_limit=300)
    # No need for multiple trackers on same model
    assert not any(m._forward_hooks for m in model.modules())  # hooks live only during a snapshot
    return tracker1, tracker


def main() -> None:
    before()
    analyzer = after()
    small, gradients = out_of_memory()
    in_eval = slow_training()
    with_outputs = slow_training(with_outputs=True)
    tracker1, tracker = hook_conflicts()

    check_plots(
        {p.name: p for p in Path("results").glob("*.png")},
        "cartography_map.png",
        "forgetting_histogram.png",
        "learning_curves_by_region.png",
    )
    a = analyzer.analyze_learning_patterns()
    assert a["epochs_recorded"] == num_epochs and a["total_examples_tracked"] == 1000
    # eval mode around track_batch changes nothing: its forward runs in eval mode anyway
    b = in_eval.analyze_learning_patterns()
    assert b == a
    # the loop's own (pre-step, train-mode) logits are another record: same epochs and examples
    c = with_outputs.analyze_learning_patterns()
    assert c["epochs_recorded"] == num_epochs and c["total_examples_tracked"] == 1000
    s = small.analyze_learning_patterns()
    assert s["total_examples_tracked"] == 500 and small.num_classes == 10  # num_classes from the logits
    flow = gradients.analyze_gradient_flow()
    assert flow["batches_measured"] == num_epochs * 2  # batches 0 and 20 of 22
    assert all(math.isfinite(r["mean_norm"]) for r in flow["layers"])
    s1, s2 = tracker1.analyze_evolution()["1"]["statistics"][0], tracker.analyze_evolution()["1"]["statistics"][0]
    assert np.isclose(s1["silhouette_score"], s2["silhouette_score"])
    print(
        f"AFTER: {a['forgetting_statistics']['examples_with_forgetting']} examples forgotten at least once, "
        f"{len(a['hard_examples'])} hard; with the loop's own logits: "
        f"{c['forgetting_statistics']['examples_with_forgetting']} and {len(c['hard_examples'])}"
    )
    print("all checks passed")


if __name__ == "__main__":
    with working_directory(__doc__):
        main()
