"""What every user dataset's ``check_source()`` shares: its errors name ``dataset.<key>``, and a
dataset read by some kinds of model only says so before the model loads.

A dataset's helpers raise with the bare field (``annotations``), as ``validate`` does, so they serve
the config checks too; the entry points a run calls (``check_source``, ``load``, ``read``) run under
``dataset_keys`` and name ``dataset.annotations``, as the config's own errors do."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, ClassVar

from modelxray.core.errors import ConfigError


@contextlib.contextmanager
def dataset_keys() -> Iterator[None]:
    """A ConfigError raised inside names its key under ``dataset.`` (a key already there is kept)."""
    try:
        yield
    except ConfigError as exc:
        raise exc.under("dataset") from None


def check_held_out(calibration_images: int, n: int) -> None:
    """Images are left to score once ``calibration_images`` of the ``n`` are held out for GPTQ/AWQ:
    the line ``VisionTaskData.hold_out`` gives once loaded, before the model loads."""
    if calibration_images >= n > 0:
        raise ConfigError(
            "calibration_images", f"holds out {calibration_images} of {n} images, leaving none to score; lower it"
        )


class KindsThatRead:
    """A dataset of one task's examples: ``kinds`` are the model kinds that read it, ``holds`` says
    what it holds. ``check_kind`` tells a model of another kind in one line, from its config alone."""

    kinds: ClassVar[tuple[str, ...]] = ()  # the model kinds (``Kind.name``) that read it
    holds: ClassVar[str] = "examples"  # what it holds, for the line: "labelled texts"

    def check_kind(self, kind: Any) -> None:
        """One line when a model of ``kind`` cannot read this dataset (a kind that reads no data, weights
        alone, is no mismatch)."""
        if kind is None or not getattr(kind, "modalities", ()) or kind.name in self.kinds:
            return
        fitting = getattr(kind, "fitting", "") or "a dataset of its kind"
        raise ConfigError("dataset", f"{self._read_by()}, and the model is of kind {kind.name}: use {fitting}")

    def load(self, *args: Any, **kwargs: Any) -> Any:
        """Reached only by a kind that reads no such examples (a causal LM reads a token stream): the
        line ``check_kind`` gives before the model loads, where the kind was not known then."""
        raise ConfigError(
            "dataset",
            f"{self._read_by()}, and the model is of another kind: use a dataset of its kind (docs/model_kinds.md)",
        )

    def _read_by(self) -> str:
        name = getattr(self, "name", type(self).__name__)
        return f"{name} holds {self.holds}, which a model of kind {' or '.join(self.kinds)} reads"
