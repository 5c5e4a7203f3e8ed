"""What the Hugging Face models trained here share (``digits_vlm``, ``digits_detector``,
``digits_segmenter``): the digits split they train on, the key of their trained directory (every
setting that shapes it: the shipped directory for the defaults, this machine's cache for the rest),
the seeded training around a model's own ``build`` and ``_train``, and, for those trained on digit
canvases, the canvases' geometry."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from modelxray.core.errors import ConfigError
from modelxray.core.subject import LoadedModel
from modelxray.models.base import ModelSource
from modelxray.models.trained_cache import TrainedKey


@dataclass
class TrainedDirectorySource(ModelSource):
    """A model trained here and loaded from its Hugging Face directory: the one shipped with
    modelxray for the default settings, else this machine's own training (cached). A subclass names
    its ``stem`` and ``cache_format``, and gives ``settings``, ``build`` (the untrained model and its
    processor), ``_train`` (returns the final loss) and ``trained_on`` (what each step saw)."""

    stem: ClassVar[str] = "trained"
    cache_format: ClassVar[int] = 1  # a subclass bumps it when training changes: stale directories are not reused

    seed: int = 0
    test_fraction: float = 0.25  # the digits split: trained on its train part, evaluated on its test part
    split_seed: int = 0
    cache_dir: str = "~/.cache/modelxray"  # trained model directories are kept here
    use_disk_cache: bool = True  # reuse a model trained before on this machine with the same settings
    retrain: bool = False  # train afresh (into cache_dir) even where shipped or cached weights exist
    save_pretrained: str | None = None  # also copy the Hugging Face directory here (model=hf loads it)
    progress: bool = True  # a progress bar while training

    def validate(self) -> None:
        super().validate()
        if not 0.0 < self.test_fraction < 1.0:
            raise ConfigError("test_fraction", f"must lie strictly between 0 and 1, got {self.test_fraction}")

    def settings(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def build(self) -> tuple[Any, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _train(self, net: Any, processor: Any) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def trained_on(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def trained_key(self) -> TrainedKey:
        """What names the trained directory: the stem, ``settings()`` and ``cache_format``."""
        return TrainedKey(self.stem, self.settings(), self.cache_format, directory=True)

    def cache_path(self) -> Path:
        """Where this machine keeps the directory it trains with these settings."""
        return self.trained_key().cache_path(self.cache_dir)

    def load(self) -> LoadedModel:
        from modelxray.models.trained_cache import load_trained_directory

        return load_trained_directory(self, self.stem, self._train_into, kind=getattr(self, "kind", None))

    def _train_into(self, directory: Path) -> str:
        import torch

        from modelxray.models.trained_cache import write_directory

        start = time.perf_counter()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            net, processor = self.build()
            final = self._train(net, processor)
        write_directory(directory, net.eval(), processor)
        return (
            f"trained now: {self.steps} steps of AdamW (lr {self.lr}, seed {self.seed}) {self.trained_on()}, "
            f"{time.perf_counter() - start:.0f} s, final training loss {final:.3f}"
        )


@dataclass
class CanvasTrainedSource(TrainedDirectorySource):
    """A model trained on fresh digit canvases every step, evaluated on canvases of the test split."""

    step_seed: ClassVar[int] = 1_000_003  # the canvases of step s are drawn with seed * step_seed + s

    canvas_size: int = 64  # the canvases it is trained on (and its input size)
    digit_size: int = 16
    max_digits: int = 3

    def validate(self) -> None:
        super().validate()
        self.require_positive("canvas_size", "digit_size", "max_digits")
        if self.canvas_size % 32:
            raise ConfigError("canvas_size", f"must be a multiple of 32 (the deepest stride), got {self.canvas_size}")
        if self.digit_size > self.canvas_size:
            raise ConfigError("digit_size", f"must fit the canvas ({self.canvas_size} px), got {self.digit_size}")

    def scene(self) -> dict[str, Any]:
        """The settings of the canvases, part of the cache key."""
        keys = ("canvas_size", "digit_size", "max_digits", "test_fraction", "split_seed")
        return {k: getattr(self, k) for k in keys}

    def trained_on(self) -> str:
        return f"on {self.batch_size} fresh canvases of train-split digits each"

    def canvases(self):
        """``draw(step)``: that step's canvases, boxes, labels and masks, from the train split."""
        from modelxray.data.digit_canvases import paste_digits
        from modelxray.data.digits import load_digits_split

        split = load_digits_split(self.test_fraction, self.split_seed)
        digits = split.x_train.view(-1, 8, 8)

        def draw(step: int):
            seed = self.seed * self.step_seed + step
            return paste_digits(
                digits, split.y_train, self.batch_size, self.canvas_size, self.digit_size, self.max_digits, seed
            )

        return draw
