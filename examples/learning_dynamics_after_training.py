"""Learning dynamics after training, from saved checkpoints: memorization per checkpoint
(``MemorizationDetector``), feature evolution and its phase transitions
(``FeatureEvolutionTracker``), and the training examples that drove a transition
(``PhaseTransitionAttributor``, TracIn).

    python examples/learning_dynamics_after_training.py [--out DIR]

First a training run writes ``./checkpoints/model_epoch_{0,10,...,50}.pth`` (``torch.save`` of the
state dict after that many epochs) of ``YourModel``, a small CNN on digits whose blocks are named
``layer1``..``layer4``. Plain SGD (lr 0.05) makes its accuracy jump between epochs 20 and 30
(0.28 -> 0.82 on test): a transition that epochs 10 and 40 lie on either side of. Then the
checkpoints are loaded and analyzed: train and test accuracy per checkpoint, feature evolution of
``layer3``/``layer4`` with its phase transitions and plots, and the training examples that drove
the change from epoch 10 to 40 (TracIn over the two checkpoints). The asserts check the result
keys, the plots in ./analysis and finite values. ``modelxray.analyze_checkpoints`` does all of it
in one call (examples/learning_dynamics_your_checkpoints.py).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from learning_examples_setup import YourModel, check_plots, digits_datasets, loaders, working_directory

from modelxray.learning_dynamics import FeatureEvolutionTracker, MemorizationDetector, PhaseTransitionAttributor

device = torch.device("cpu")
train_dataset, test_dataset = digits_datasets()
train_loader, test_loader = loaders(train_dataset, test_dataset, batch_size=64)


def train_and_save_checkpoints(checkpoint_dir: str = "./checkpoints", epochs: int = 50) -> None:
    """The user's training run: a state dict every 10 epochs (epoch 0: the initial weights)."""
    Path(checkpoint_dir).mkdir(exist_ok=True)
    torch.manual_seed(0)
    model = YourModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(epochs + 1):
        if epoch % 10 == 0:
            torch.save(model.state_dict(), f"{checkpoint_dir}/model_epoch_{epoch}.pth")
        for inputs, targets in train_loader:
            loss = torch.nn.functional.cross_entropy(model(inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def main() -> None:
    train_and_save_checkpoints()

    # ---- load the checkpoints, memorization per checkpoint ---------------------------------------
    # Load checkpoints
    checkpoint_dir = "./checkpoints"
    checkpoints = {}

    for epoch in [0, 10, 20, 30, 40, 50]:
        model = YourModel()
        model.load_state_dict(torch.load(f"{checkpoint_dir}/model_epoch_{epoch}.pth"))
        model.eval()
        checkpoints[epoch] = model

    # Analyze memorization evolution
    mem_detector = MemorizationDetector(num_classes=10)

    for epoch, model in checkpoints.items():
        metrics = mem_detector.compute_memorization_scores(model, train_loader, test_loader, epoch)
        print(f"Epoch {epoch}: Train={metrics['train_accuracy']:.4f}, Test={metrics['test_accuracy']:.4f}")

    # Analyze memorization patterns
    mem_analysis = mem_detector.analyze_memorization_evolution()
    print(f"Transition at epoch: {mem_analysis['transition_epoch']}")

    mem_detector.plot_memorization(save_dir="./analysis")

    # ---- feature evolution across the checkpoints ----------------------------------------------------
    # Track feature evolution across checkpoints
    feature_tracker = FeatureEvolutionTracker(
        model=YourModel(),  # Fresh model for tracking
        layer_names=["layer3", "layer4"],
        device=device,
    )

    for epoch, checkpoint_model in checkpoints.items():
        # Load weights into tracker's model
        feature_tracker.model.load_state_dict(checkpoint_model.state_dict())

        # Track features
        feature_tracker.track_epoch(train_loader, epoch, sample_limit=500)

    # Analyze evolution
    analysis = feature_tracker.analyze_evolution()

    # Detect transitions
    transitions = feature_tracker.detect_phase_transitions("layer4", metric="silhouette_score")
    print(f"Phase transitions at epochs: {transitions}")

    # Visualize
    feature_tracker.visualize_evolution("layer4", save_dir="./analysis", method="pca")
    feature_tracker.plot_metrics_evolution("layer4", save_dir="./analysis")
    feature_analysis = analysis

    # ---- which training examples drove the transition ----------------------------------------------
    # Identify which examples drive transitions
    pt_attributor = PhaseTransitionAttributor(
        model_checkpoints={
            10: checkpoints[10],  # Before transition
            40: checkpoints[40],  # After transition
        },
        train_data=train_dataset,
        test_data=test_dataset,
    )

    # Compute attributions
    attributions = pt_attributor.compute_transition_attributions(pre_transition_epoch=10, post_transition_epoch=40)

    # Find critical examples
    critical = pt_attributor.find_critical_examples(attributions, top_k=100)
    analysis = pt_attributor.analyze_critical_examples(critical)

    print(f"Critical examples: {len(critical)}")
    print(f"Label distribution: {analysis['label_distribution']}")
    # ---- checks ----------------------------------------------------------------------------------

    # memorization: one evaluation per checkpoint, its keys, finite values
    assert [m["epoch"] for m in mem_detector.epoch_memorization] == [0, 10, 20, 30, 40, 50]
    assert all(
        math.isfinite(m["train_accuracy"]) and math.isfinite(m["test_accuracy"])
        for m in mem_detector.epoch_memorization
    )
    assert mem_detector.epoch_memorization[-1]["test_accuracy"] > mem_detector.epoch_memorization[1]["test_accuracy"]
    assert "transition_epoch" in mem_analysis and mem_analysis["epochs_tracked"] == 6
    # features: both layers at every checkpoint, transitions among the checkpoint epochs
    for layer in ("layer3", "layer4"):
        assert feature_analysis[layer]["epochs"] == [0, 10, 20, 30, 40, 50]
        stats = feature_analysis[layer]["statistics"]
        assert all(math.isfinite(s["silhouette_score"]) and math.isfinite(s["probe_accuracy"]) for s in stats)
        assert stats[-1]["silhouette_score"] > stats[0]["silhouette_score"]  # classes separate as it learns
    assert set(transitions) <= {0, 10, 20, 30, 40, 50}
    check_plots(
        {p.name: p for p in Path("analysis").glob("*.png")},
        "memorization.png",
        "feature_pca_layer4.png",
        "feature_metrics_layer4.png",
    )
    # attribution: a score per training example, 100 critical ones, their labels counted
    assert len(attributions) == len(train_dataset) and all(math.isfinite(v) for v in attributions.values())
    assert len(critical) == 100 and len(set(critical)) == 100
    assert sum(analysis["label_distribution"].values()) == 100
    assert min(attributions[i] for i in critical) >= max(v for i, v in attributions.items() if i not in set(critical))
    print(
        f"TracIn on {pt_attributor.n_targets} test examples learned between epochs 10 and 40; "
        f"most common label among the critical examples: {analysis['most_common_label']}"
    )
    print("all checks passed")


if __name__ == "__main__":
    with working_directory(__doc__):
        main()
