"""``analyzer=learning_dynamics``: the learning-dynamics analyses after training, on saved checkpoints.

    python run.py experiment=normal train=none analyzer=learning_dynamics model.checkpoints=DIR

Each checkpoint (``model.checkpoints``, in step order) is one "epoch" of the same callbacks that run
during training: the training set's logits give per-example correctness and confidence (forgetting,
cartography), one full-batch backward gives the gradient flow, the callbacks evaluate train/test
accuracy (memorization, transition steps, change points) and features (CKA, probe, Fourier
sparsity), and TracIn attributes what was learned between the first and the last checkpoint to
training examples (with ``lr``, the learning rate the checkpoints were trained at). Granularity is
that of the checkpoints: forgetting events between two checkpoints are only seen if both see them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from modelxray.analyzers.base import Analyzer
from modelxray.core.errors import ConfigError
from modelxray.core.result import Result, RunContext


def _default_sections() -> dict[str, Any]:
    return {
        "examples": {},
        "grad_flow": {},
        "memorization": {"transition_level": 0.95},
        "features": {"every_n_epochs": 1},
        "attribution": {"every_n_steps": 1, "max_train": 2000},
    }


@dataclass
class LearningDynamicsAnalyzer(Analyzer):
    name: ClassVar[str] = "learning_dynamics"
    plots_module: ClassVar[str] = "modelxray.analyzers.learning_dynamics.plots"
    tasks: ClassVar[tuple[str, ...]] = ("classification",)
    lr: float = 1e-3  # learning rate between checkpoints (TracIn weighs each checkpoint's gradients by it)
    batch_size: int = 4096  # rows per forward/backward over the training set
    sections: dict = field(default_factory=_default_sections)  # train.learning sections (null = off)

    def validate(self) -> None:
        from modelxray.training.config import LearningConfig

        self.require_positive("lr", "batch_size")
        unknown = set(self.sections) - set(_default_sections())
        if unknown:
            raise ConfigError(
                f"sections.{sorted(unknown)[0]}", f"unknown section; valid: {', '.join(_default_sections())}"
            )
        try:
            self._learning = LearningConfig(**self.sections)
        except ConfigError as exc:
            raise exc.under("sections") from None

    def preflight(self, subject) -> None:
        if len(getattr(subject.info, "checkpoints", None) or []) < 2:
            raise ConfigError(
                "model.checkpoints",
                "the learning-dynamics analyzer needs a directory of at least two "
                "checkpoints (train with train.checkpoint_every=N, then model.checkpoints=<dir>)",
            )

    def run(self, subject, ctx: RunContext) -> Result:
        from modelxray.analyzers.learning_dynamics.run import run

        return run(self, subject, ctx)
