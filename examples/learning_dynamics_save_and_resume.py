"""Saving a ``LearningDynamicsAnalyzer``'s state during training and resuming from it, with memory
kept in check (a limited number of tracked examples, ``sample_limit`` for feature tracking) and
hooks cleaned up.

    python examples/learning_dynamics_save_and_resume.py [--out DIR]

A 64-64-10 MLP trains on digits for epochs 0..50 (batches of 128) with a ``LearningDynamicsAnalyzer``
limited to the first 1,000 training examples and a ``FeatureEvolutionTracker`` on 500 examples
every 10th epoch. Every 10th epoch the analyzer is saved as
``./checkpoints/analyzer_epoch_{epoch}.pkl``: that writes ``analyzer_epoch_{epoch}.pkl.json`` and
``.pkl.npz`` (JSON and numpy arrays, never pickle). Later, ``LearningDynamicsAnalyzer.load`` reads
the epoch-50 analyzer back and it records 5 more epochs beside the analyzer that never stopped;
the asserts check the two agree exactly, and the files and keys written.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from learning_examples_setup import digits_datasets, digits_mlp, loaders, working_directory

from modelxray.learning_dynamics import FeatureEvolutionTracker, LearningDynamicsAnalyzer

batch_size = 128


def train_epoch(model, optimizer, train_loader, epoch, *analyzers) -> None:
    for batch_idx, (inputs, targets) in enumerate(train_loader):
        outputs = model(inputs)
        loss = F.cross_entropy(outputs, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        batch_indices = torch.arange(batch_idx * batch_size, batch_idx * batch_size + len(targets))
        for analyzer in analyzers:
            analyzer.track_batch(model, inputs, targets, batch_indices, epoch, outputs=outputs)
    for analyzer in analyzers:
        analyzer.compute_epoch_statistics(train_loader, model, epoch)


def main() -> None:
    train_dataset, test_dataset = digits_datasets()
    train_loader, _ = loaders(train_dataset, test_dataset, batch_size)
    model = digits_mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    Path("checkpoints").mkdir(exist_ok=True)

    # ---- memory: limit the tracked examples -------------------------------------------------------
    # Limit tracked examples
    analyzer = LearningDynamicsAnalyzer(
        num_classes=10,
        track_examples=1000,  # Only track first 1000 examples
    )
    feature_tracker = FeatureEvolutionTracker(model, layer_names=["1"])  # the hidden layer's ReLU

    # ---- save the analysis state in the training loop, load it later ------------------------------
    for epoch in range(51):
        train_epoch(model, optimizer, train_loader, epoch, analyzer)
        if epoch % 10 == 0:
            # For feature tracking, use sample_limit
            feature_tracker.track_epoch(train_loader, epoch, sample_limit=500)
        # During training
        if epoch % 10 == 0:
            analyzer.save(f"./checkpoints/analyzer_epoch_{epoch}.pkl")

    # Later, load and continue
    analyzer_loaded = LearningDynamicsAnalyzer.load("./checkpoints/analyzer_epoch_50.pkl")

    # ---- clean up --------------------------------------------------------------------------------
    feature_tracker.remove_hooks()  # Clean up before deleting
    # ---- checks ----------------------------------------------------------------------------------

    for epoch in range(0, 51, 10):
        for suffix in (".pkl.json", ".pkl.npz"):
            assert Path(f"checkpoints/analyzer_epoch_{epoch}{suffix}").stat().st_size > 0
    assert not list(Path("checkpoints").glob("*.pkl"))  # nothing pickled
    assert analyzer_loaded.analyze_learning_patterns() == analyzer.analyze_learning_patterns()
    for epoch in range(51, 56):  # continue both: the loaded one must record exactly what the running one does
        train_epoch(model, optimizer, train_loader, epoch, analyzer, analyzer_loaded)
    a, b = analyzer.analyze_learning_patterns(), analyzer_loaded.analyze_learning_patterns()
    assert a == b and a["epochs_recorded"] == 56 and a["total_examples_tracked"] == 1000
    ha, hb = analyzer.recorder.history(), analyzer_loaded.recorder.history()
    assert all(np.array_equal(ha[k], hb[k], equal_nan=True) for k in ha)
    assert analyzer.epoch_stats == analyzer_loaded.epoch_stats
    evolution = feature_tracker.analyze_evolution()["1"]
    assert evolution["epochs"] == [0, 10, 20, 30, 40, 50]
    assert len(feature_tracker.callback.sample_labels) == 500
    print(
        f"Saved 6 analyzer states; the one loaded from epoch 50 and the running one agree after 5 more epochs "
        f"({a['forgetting_statistics']['total_events']} forgetting events, {len(a['hard_examples'])} hard examples)"
    )
    print("all checks passed")


if __name__ == "__main__":
    with working_directory(__doc__):
        main()
