"""Several learning-dynamics trackers in one training loop: ``LearningDynamicsAnalyzer`` (per-example
dynamics), ``GradientFlowAnalyzer``, ``MemorizationDetector`` and ``FeatureEvolutionTracker``, each
at its own period.

    python examples/learning_dynamics_during_training.py [--out DIR]

A 64-128-10 MLP trains on digits with 20% of the training labels flipped (``dataset=digits_noisy``):
the setting where a model memorizes. Three trackers run together in the loop: per-example
dynamics every batch, gradient flow every 10th batch (after ``loss.backward()``, before
``optimizer.step()``), train/test memorization every 5th epoch; then each writes its plots. A
second run tracks each analysis at its own period, with feature evolution every 10th epoch and
``track_batch`` given the logits the loop already computed. The asserts check the result keys, the
plots in ./analysis, finite values, and that the flipped labels are what the model finds hardest.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn as nn
from learning_examples_setup import check_plots, digits_datasets, loaders, working_directory

from modelxray.learning_dynamics import (
    FeatureEvolutionTracker,
    GradientFlowAnalyzer,
    LearningDynamicsAnalyzer,
    MemorizationDetector,
)

batch_size = 64
device = torch.device("cpu")


def noisy_digits_run(seed: int = 0):
    train_dataset, test_dataset = digits_datasets(noise=0.2)
    train_loader, test_loader = loaders(train_dataset, test_dataset, batch_size)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    return train_dataset, train_loader, test_loader, model, optimizer, nn.CrossEntropyLoss()


def complete_example() -> None:
    num_epochs = 30
    train_dataset, train_loader, test_loader, model, optimizer, criterion = noisy_digits_run()

    # ---- three trackers in one loop --------------------------------------------------------------
    # Initialize analyzers
    dynamics = LearningDynamicsAnalyzer(num_classes=10, track_examples=1000, device=device)

    gradients = GradientFlowAnalyzer(
        model=model,
        track_layers=None,  # Track all layers
    )

    memorization = MemorizationDetector(num_classes=10, device=device)

    # Training loop
    for epoch in range(num_epochs):
        for batch_idx, (inputs, targets) in enumerate(train_loader):
            # Forward pass
            outputs = model(inputs)
            loss = criterion(outputs, targets)

            # Backward pass
            optimizer.zero_grad()
            loss.backward()

            # Track gradients BEFORE optimizer.step()
            if batch_idx % 10 == 0:
                gradients.track_batch_gradients(loss, epoch, batch_idx)

            optimizer.step()

            # Track learning dynamics
            batch_indices = torch.arange(batch_idx * batch_size, min((batch_idx + 1) * batch_size, len(train_dataset)))
            dynamics.track_batch(model, inputs, targets, batch_indices, epoch)

        # End-of-epoch analysis
        dynamics.compute_epoch_statistics(train_loader, model, epoch)
        gradients.compute_epoch_statistics(epoch)

        if epoch % 5 == 0:
            mem_metrics = memorization.compute_memorization_scores(model, train_loader, test_loader, epoch)
            print(f"Epoch {epoch}: Memorization={mem_metrics['memorization_score']:.4f}")

    # Generate reports
    dynamics.plot_learning_dynamics(save_dir="./analysis")
    gradients.plot_gradient_flow(save_dir="./analysis")
    memorization.plot_memorization(save_dir="./analysis")
    # ---- checks ----------------------------------------------------------------------------------

    written = {p.name: p for p in Path("analysis").glob("*.png")}
    check_plots(
        written,
        "cartography_map.png",
        "forgetting_histogram.png",
        "learning_curves_by_region.png",
        "gradient_flow.png",
        "memorization.png",
    )
    for key in ("train_accuracy", "test_accuracy", "train_loss", "test_loss", "memorization_score"):
        assert math.isfinite(mem_metrics[key]), key
    assert mem_metrics["memorization_score"] == mem_metrics["train_accuracy"] - mem_metrics["test_accuracy"]
    assert [m["epoch"] for m in memorization.epoch_memorization] == list(range(0, num_epochs, 5))
    evolution = memorization.analyze_memorization_evolution()
    assert {"transition_epoch", "max_memorization", "final_memorization", "epochs_tracked"} <= set(evolution)
    flow = gradients.analyze_gradient_flow()
    n_batches = math.ceil(len(train_dataset) / batch_size)
    assert flow["batches_measured"] == num_epochs * len(range(0, n_batches, 10))
    assert {r["layer"] for r in flow["layers"]} == {"0", "2"}  # the two Linear layers of the Sequential
    assert all(math.isfinite(r["mean_norm"]) and r["mean_norm"] > 0 for r in flow["layers"])
    assert len(gradients.epoch_stats) == num_epochs and "0" in gradients.epoch_stats[-1]["layer_stats"]
    analysis = dynamics.analyze_learning_patterns()
    # the flipped labels are what the model finds hardest: compare the hard region with them
    clean_y = digits_datasets()[0].tensors[1]
    flipped = set(torch.nonzero(train_dataset.tensors[1] != clean_y).flatten().tolist())
    hard = analysis["hard_examples"][:100]
    share = sum(i in flipped for i in hard) / max(len(hard), 1)
    print(
        f"Final memorization score {evolution['final_memorization']:+.3f}; "
        f"{share:.0%} of the {len(hard)} hardest examples have a flipped label (20% of all do)"
    )
    assert share > 0.5


def periodic_tracking() -> None:
    """Each analysis at its own period, in one loop."""
    num_epochs = 21
    train_dataset, train_loader, test_loader, model, optimizer, criterion = noisy_digits_run(seed=1)
    dynamics = LearningDynamicsAnalyzer(num_classes=10)
    memorization = MemorizationDetector(num_classes=10)
    feature_tracker = FeatureEvolutionTracker(model, layer_names=["1"])  # the hidden ReLU's output

    # ---- each analysis at its own period ---------------------------------------------------------
    for epoch in range(num_epochs):
        for batch_idx, (inputs, targets) in enumerate(train_loader):
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = criterion(outputs, targets)
            loss.backward()
            optimizer.step()
            batch_indices = torch.arange(batch_idx * batch_size, min((batch_idx + 1) * batch_size, len(train_dataset)))
            dynamics.track_batch(model, inputs, targets, batch_indices, epoch, outputs=outputs)

        # Track every epoch
        dynamics.compute_epoch_statistics(train_loader, model, epoch)

        # Track every 5 epochs
        if epoch % 5 == 0:
            memorization.compute_memorization_scores(model, train_loader, test_loader, epoch)

        # Track every 10 epochs
        if epoch % 10 == 0:
            feature_tracker.track_epoch(train_loader, epoch, sample_limit=500)
    # ---- checks ----------------------------------------------------------------------------------

    assert len(dynamics.epoch_stats) == num_epochs
    assert [m["epoch"] for m in memorization.epoch_memorization] == [0, 5, 10, 15, 20]
    evolution = feature_tracker.analyze_evolution()["1"]
    assert evolution["epochs"] == [0, 10, 20]
    stats = evolution["statistics"]
    assert all(math.isfinite(s["silhouette_score"]) and math.isfinite(s["probe_accuracy"]) for s in stats)
    assert math.isnan(stats[0]["cka_prev"]) and all(0.0 < s["cka_prev"] <= 1.0 + 1e-9 for s in stats[1:])
    print(
        f"Periodic tracking: silhouette of the hidden layer {stats[0]['silhouette_score']:.3f} -> "
        f"{stats[-1]['silhouette_score']:.3f} over epochs {evolution['epochs']}"
    )


def main() -> None:
    complete_example()
    periodic_tracking()
    print("all checks passed")


if __name__ == "__main__":
    with working_directory(__doc__):
        main()
