"""PhaseTransitionAttributor: which training examples drove a transition, by TracIn over a user's
``{epoch: model}`` checkpoints (transition_tracin)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
from torch import nn

from modelxray.core.errors import ConfigError
from modelxray.learning_dynamics.attribution import TracInCheckpoint, TracInResult
from modelxray.learning_dynamics.callbacks.attribution import transition_tracin
from modelxray.learning_dynamics.callbacks.configs import TransitionAttributionConfig
from modelxray.learning_dynamics.loaders import dataset_tensors, describe
from modelxray.learning_dynamics.trackers._shared import _config


class PhaseTransitionAttributor:
    """Which training examples drove a transition, from ``{epoch: model}`` checkpoints: TracIn
    (:mod:`modelxray.learning_dynamics.attribution`) summed over the checkpoints from the pre- to the
    post-transition epoch, on the test examples the post-transition model gets right and the
    pre-transition one got wrong (``target="test"``: the whole test set).

    ``train_data`` / ``test_data``: datasets (or DataLoaders) of ``(input tensor, label)`` pairs,
    stacked once. ``learning_rate`` weighs every checkpoint alike (TracIn's step size: it scales
    the scores, not their order)."""

    def __init__(
        self,
        model_checkpoints: Mapping[int, nn.Module],
        train_data,
        test_data,
        device: Any = None,
        learning_rate: float = 1.0,
        **options: Any,
    ):
        self.model_checkpoints = self._check_checkpoints(model_checkpoints)
        if not learning_rate > 0:
            raise ConfigError("learning_rate", f"must be positive, got {learning_rate}")
        self.device = device
        self.learning_rate = float(learning_rate)
        unused = ("every_n_steps", "start_step", "end_step", "max_checkpoints")  # the checkpoints are given
        self.config = _config(TransitionAttributionConfig, "PhaseTransitionAttributor", options, unused)
        self.x_train, self.y_train = dataset_tensors(train_data, "train_data")
        self.x_test, self.y_test = dataset_tensors(test_data, "test_data")
        self.result: TracInResult | None = None
        self.n_targets = 0

    @staticmethod
    def _check_checkpoints(ckpts) -> dict[int, nn.Module]:
        if not isinstance(ckpts, Mapping) or len(ckpts) < 2:
            raise ConfigError("model_checkpoints", f"must map at least two epochs to models, got {describe(ckpts)}")
        out = {}
        keys = None
        for epoch, model in sorted(ckpts.items()):
            if not isinstance(model, nn.Module):
                raise ConfigError("model_checkpoints", f"epoch {epoch} maps to {describe(model)}, not a model")
            k = {name: tuple(t.shape) for name, t in model.state_dict().items()}
            if keys is not None and k != keys:
                odd = sorted(n for n in k.keys() | keys.keys() if k.get(n) != keys.get(n))[:3]
                raise ConfigError("model_checkpoints", f"epoch {epoch} has another architecture (differs in {odd})")
            keys = k
            out[int(epoch)] = model
        return out

    def compute_transition_attributions(
        self, pre_transition_epoch: int, post_transition_epoch: int, method: str = "tracin"
    ) -> dict[int, float]:
        """``{training position: influence}`` across the transition: positive for examples whose
        training steps lowered the loss of what the transition taught (proponents)."""
        if method != "tracin":
            raise ConfigError("method", f"must be tracin, got {method!r}")
        have = sorted(self.model_checkpoints)
        for key, e in (
            ("pre_transition_epoch", pre_transition_epoch),
            ("post_transition_epoch", post_transition_epoch),
        ):
            if e not in self.model_checkpoints:
                raise ConfigError(key, f"no checkpoint for epoch {e}; checkpoints: {have}")
        if post_transition_epoch <= pre_transition_epoch:
            raise ConfigError("post_transition_epoch", f"must come after pre_transition_epoch {pre_transition_epoch}")
        epochs = [e for e in have if pre_transition_epoch <= e <= post_transition_epoch]
        checkpoints = [
            TracInCheckpoint(
                {k: v.detach() for k, v in self.model_checkpoints[e].state_dict().items()}, self.learning_rate, e
            )
            for e in epochs
        ]
        self.result, self.n_targets = transition_tracin(
            self.model_checkpoints[post_transition_epoch],
            checkpoints,
            self.x_train,
            self.y_train,
            self.x_test,
            self.y_test,
            self.config,
        )
        return {i: float(v) for i, v in enumerate(self.result.influence)}

    @staticmethod
    def find_critical_examples(
        attributions: Mapping[int, float], top_k: int = 100, method: str = "highest"
    ) -> list[int]:
        """The ``top_k`` training positions with the highest (``lowest``: most negative) attribution."""
        if method not in ("highest", "lowest"):
            raise ConfigError("method", f"must be highest or lowest, got {method!r}")
        if top_k < 1:
            raise ConfigError("top_k", f"must be positive, got {top_k}")
        items = sorted(attributions.items(), key=lambda kv: (-kv[1] if method == "highest" else kv[1], kv[0]))
        return [int(i) for i, _ in items[:top_k]]

    def analyze_critical_examples(self, critical_indices: list[int]) -> dict[str, Any]:
        """``num_examples``, ``label_distribution`` ({label: count}, by label), ``label_share``
        beside ``train_label_share`` (the whole training set's: the base rate to compare with),
        ``most_common_label``, and, after ``compute_transition_attributions``, ``mean_influence``
        and ``mean_self_influence`` of these examples."""
        idx = np.asarray(list(critical_indices), np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self.y_train)):
            raise ConfigError("critical_indices", f"must be training positions in [0, {len(self.y_train)})")
        labels = self.y_train.numpy()[idx]
        counts = Counter(int(v) for v in labels)
        all_counts = Counter(int(v) for v in self.y_train.numpy())
        n = max(len(idx), 1)
        out: dict[str, Any] = {
            "num_examples": int(len(idx)),
            "label_distribution": dict(sorted(counts.items())),
            "label_share": {k: v / n for k, v in sorted(counts.items())},
            "train_label_share": {k: v / len(self.y_train) for k, v in sorted(all_counts.items())},
            "most_common_label": counts.most_common(1)[0][0] if counts else None,
        }
        if self.result is not None and idx.size:
            out["mean_influence"] = float(self.result.influence[idx].mean())
            out["mean_self_influence"] = float(self.result.self_influence[idx].mean())
        return out
