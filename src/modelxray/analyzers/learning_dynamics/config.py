"""``analyzer=learning_dynamics``: the learning-dynamics analyses after training, on saved checkpoints.

    python run.py experiment=normal train=none analyzer=learning_dynamics model.checkpoints=DIR

Each checkpoint (``model.checkpoints``, in step order) is one "epoch" of the same callbacks that run
during training: the training set's logits give per-example correctness and confidence (forgetting,
cartography), one full-batch backward gives the gradient flow, the callbacks evaluate train/test
accuracy (memorization, transition steps, change points) and features (CKA, probe, Fourier
sparsity), and TracIn attributes what was learned between the first and the last checkpoint to
training examples (with ``lr``, the learning rate the checkpoints were trained at). Granularity is
that of the checkpoints: forgetting events between two checkpoints are only seen if both see them.

Your own checkpoints (``torch.save``d state dicts of your model class, any file naming) instead of
modelxray's: ``checkpoints.pattern`` names the files (``model_epoch_{epoch}.pth``), in
``checkpoints.dir`` (default: the folder of ``model.path``), and ``model=file
model.architecture={_target_: ...}`` is the class they fit::

    python run.py analyzer=learning_dynamics dataset=digits model=file model.path=ckpts/model_epoch_5.pth \\
        'model.architecture={_target_: mypkg.nets.MLP}' model.kind=image_classification 'model.input_shape=[1,8,8]' \\
        'analyzer.learning_dynamics.checkpoints.pattern="model_epoch_{epoch}.pth"'

Every file is read (``torch.load(weights_only=True)``) and checked against the model in
``preflight``, before any analysis. From Python: :func:`modelxray.analyze_checkpoints`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from modelxray.analyzers.base import Analyzer
from modelxray.core.configurable import Configurable
from modelxray.core.errors import ConfigError
from modelxray.kinds.classifier import Classifier
from modelxray.training_dynamics.config import section


def _default_sections() -> dict[str, Any]:
    return {
        "examples": {},
        "grad_flow": {},
        "memorization": {"transition_level": 0.95},
        "features": {"every_n_epochs": 1},
        "attribution": {"every_n_steps": 1, "max_train": 2000},
    }


@dataclass
class CheckpointsConfig(Configurable):
    """Which checkpoints are walked: modelxray's own (``model.checkpoints``, ``pattern`` null) or a
    directory of your ``torch.save``d state dicts whose names carry the epoch or step."""

    pattern: str | None = None  # your files' names, the number as {epoch} or {step}: model_epoch_{epoch}.pth
    dir: str | None = None  # the folder of your files (null: the folder of model.path)
    state_dict_key: str = "auto"  # the entry holding the state dict: auto (the file, else model_state_dict...)

    def validate(self) -> None:
        from modelxray.models.saved_checkpoints import parse_pattern

        if self.pattern is not None:
            parse_pattern(self.pattern, "pattern")
        elif self.dir is not None:
            raise ConfigError(
                "pattern", "is needed with dir: your files' names with {epoch} or {step}, e.g. model_epoch_{epoch}.pth"
            )
        if not self.state_dict_key.strip():
            raise ConfigError("state_dict_key", "must be auto or the entry of your files that holds the state dict")


@dataclass
class CheckpointDynamicsAnalyzer(Analyzer):
    """The ``learning_dynamics`` analyzer, on a classifier's saved checkpoints. (Its per-batch
    counterpart inside a training loop is ``modelxray.learning_dynamics.LearningDynamicsAnalyzer``.)"""

    name: ClassVar[str] = "learning_dynamics"
    plots_module: ClassVar[str] = "modelxray.analyzers.learning_dynamics.plots"
    run_module: ClassVar[str] = "modelxray.analyzers.learning_dynamics.run"
    model_kinds: ClassVar[tuple[type, ...]] = (Classifier,)
    lr: float = 1e-3  # learning rate between checkpoints (TracIn weighs each checkpoint's gradients by it)
    batch_size: int = 4096  # rows per forward/backward over the training set
    sections: dict = field(default_factory=_default_sections)  # train.learning sections (null = off)
    checkpoints: Any = field(default_factory=CheckpointsConfig)  # your own files: checkpoints.pattern, dir

    def validate(self) -> None:
        from modelxray.training.config import LearningConfig

        self.require_positive("lr", "batch_size")
        self.checkpoints = section(CheckpointsConfig, self.checkpoints, "checkpoints")
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
        """The checkpoints found and, for your own files, every one read and checked against the
        model (names and shapes), so a file that does not fit fails before any analysis."""
        from modelxray.analyzers.learning_dynamics.checkpoints import checkpoints_of

        checkpoints_of(self, subject, check=True)
