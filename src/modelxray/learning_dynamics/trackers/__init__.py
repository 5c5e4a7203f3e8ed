"""Learning dynamics from your own training loop, DataLoaders and checkpoints: one call per batch,
one per epoch, with the names of the "Delayed Generalization" analysis API.

Why this module: the learning callbacks (:mod:`modelxray.learning_dynamics.callbacks`) follow the hooks of
modelxray's training loop (a ``TrainState`` holding the task's tensors). Code written for the
``data_attribution.analysis`` API calls per-batch and per-epoch methods with its own model,
batches, DataLoaders and ``{epoch: model}`` checkpoints instead. These classes keep that API's
class, method, argument and result-key names and run the callbacks underneath, so every number
is the callbacks' (definitions in their modules); only the imports change::

    from modelxray.learning_dynamics import LearningDynamicsAnalyzer

    analyzer = LearningDynamicsAnalyzer(num_classes=10)
    for epoch in range(num_epochs):
        for batch_idx, (inputs, targets) in enumerate(train_loader):
            outputs = model(inputs)
            ...
            analyzer.track_batch(model, inputs, targets, batch_indices, epoch, outputs=outputs)
        analyzer.compute_epoch_statistics(train_loader, model, epoch)
    analysis = analyzer.analyze_learning_patterns()

=============================  =========================================================  ==============================
class                          calls                                                      backed by
=============================  =========================================================  ==============================
``LearningDynamicsAnalyzer``   ``track_batch``, ``compute_epoch_statistics``,             ``ExampleDynamicsCallback``
                               ``analyze_learning_patterns``, ``plot_learning_dynamics``, (forgetting, cartography)
                               ``save`` / ``load``
``GradientFlowAnalyzer``       ``track_batch_gradients``, ``compute_epoch_statistics``,   ``GradientFlowCallback``
                               ``analyze_gradient_flow``, ``plot_gradient_flow``
``MemorizationDetector``       ``compute_memorization_scores`` (train/test DataLoaders),  ``MemorizationCallback``
                               ``analyze_memorization_evolution``, ``plot_memorization``
``FeatureEvolutionTracker``    ``track_epoch``, ``analyze_evolution``,                    ``FeatureEvolutionCallback``
                               ``detect_phase_transitions``, ``visualize_evolution``,
                               ``plot_metrics_evolution``
``PhaseTransitionAttributor``  ``compute_transition_attributions``,                       TracIn (``transition_tracin``)
                               ``find_critical_examples``, ``analyze_critical_examples``
=============================  =========================================================  ==============================

Keyword options of each class are the keys of its callback's config (defaults there), e.g.
``LearningDynamicsAnalyzer(num_classes=10, selection="random")``. Conventions:

- epochs are the caller's labels; the series and plots are indexed by them;
- every evaluation pass runs in eval mode without gradients, restores the model's mode and leaves
  torch's global random state as it found it (iterating a shuffled DataLoader draws from it);
- ``device`` arguments are accepted for the API's signatures: work runs where the model's
  parameters are;
- ``save(path)`` writes ``path.json`` + ``path.npz`` (never pickle), also for a ``.pkl`` path.
"""

from __future__ import annotations

from modelxray.learning_dynamics.trackers.attribution import PhaseTransitionAttributor
from modelxray.learning_dynamics.trackers.examples import LearningDynamicsAnalyzer
from modelxray.learning_dynamics.trackers.features import FEATURE_METRICS, FeatureEvolutionTracker
from modelxray.learning_dynamics.trackers.gradient_flow import GradientFlowAnalyzer
from modelxray.learning_dynamics.trackers.memorization import MemorizationDetector

__all__ = [
    "FEATURE_METRICS",
    "FeatureEvolutionTracker",
    "GradientFlowAnalyzer",
    "LearningDynamicsAnalyzer",
    "MemorizationDetector",
    "PhaseTransitionAttributor",
]
