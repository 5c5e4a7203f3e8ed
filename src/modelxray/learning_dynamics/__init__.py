"""Learning dynamics: which examples, which layers and when a model learned, forgot or memorized.

Pure metric functions (numpy/torch/scikit-learn, no plotting, no state):

- :mod:`.evaluation`: per-example loss/correctness/true-class probability from logits; ``evaluate``;
- :mod:`.forgetting`: forgetting events, first-learned epoch, unforgettable / never-learned (Toneva et al. 2019);
- :mod:`.cartography`: confidence, variability, correctness, easy/ambiguous/hard (Swayamdipta et al. 2020);
- :mod:`.gradient_flow`: per-layer gradient norms, vanishing/exploding flags;
- :mod:`.memorization`: train/test gap events, fitted share of flipped labels, overlap with a region;
- :mod:`.features`: activations by module name, PCA, silhouette, linear probe; :mod:`.cka`: linear CKA
  (Kornblith et al. 2019); :mod:`.fourier`: Fourier sparsity of a residue embedding, weight norm
  (Nanda et al. 2023);
- :mod:`.transitions`: change points (``ruptures``) and level-crossing transition steps;
- :mod:`.attribution`: TracIn influence and self-influence over checkpoints (Pruthi et al. 2020).

In your own loop, with your DataLoaders and ``{epoch: model}`` checkpoints (:mod:`.trackers`, one
call per batch and one per epoch): ``LearningDynamicsAnalyzer``, ``GradientFlowAnalyzer``,
``MemorizationDetector``, ``FeatureEvolutionTracker``, ``PhaseTransitionAttributor``.

State: :class:`.recorder.ExampleRecorder` (vectorised per-example history from the training
forward's logits); :mod:`.state` saves/loads any of it as JSON + npz (no pickle).

Callbacks for the training loop (:mod:`.callbacks`), metric families they log at ``state.step``:
``examples/*``, ``cartography/*`` (ExampleDynamicsCallback), ``grad_flow/*`` (GradientFlowCallback),
``memorization/*`` and ``transitions/*`` (MemorizationCallback), ``features/*``
(FeatureEvolutionCallback), ``transitions/attribution_*`` (TransitionAttributionCallback). Each
module's docstring lists its metric names. Build a callback from keywords, a dict or its config
dataclass (``ExampleDynamicsConfig(...).build()``). ``modelxray.learning_dynamics.plots`` draws their reports.
"""

from __future__ import annotations

from modelxray.core.lazy import lazy_exports

_EXPORTS = {
    "ExampleDynamicsCallback": "callbacks",
    "ExampleDynamicsConfig": "callbacks",
    "FeatureEvolutionCallback": "callbacks",
    "FeatureEvolutionConfig": "callbacks",
    "GradientFlowCallback": "callbacks",
    "GradientFlowConfig": "callbacks",
    "MemorizationCallback": "callbacks",
    "MemorizationConfig": "callbacks",
    "TransitionAttributionCallback": "callbacks",
    "TransitionAttributionConfig": "callbacks",
    "FeatureEvolutionTracker": "trackers",
    "GradientFlowAnalyzer": "trackers",
    "LearningDynamicsAnalyzer": "trackers",
    "MemorizationDetector": "trackers",
    "PhaseTransitionAttributor": "trackers",
    "evaluate": "evaluation",
    "evaluate_loader": "evaluation",
    "per_example_stats": "evaluation",
    "load_state": "state",
    "save_state": "state",
}
__all__ = sorted(_EXPORTS)
# the names above, imported on first use: callbacks.configs (validated with every training config)
# must not pull numpy and torch in through this package
__getattr__ = lazy_exports(__name__, _EXPORTS)
