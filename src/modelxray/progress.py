"""Progress bars (tqdm) that the ``progress`` config key switches off everywhere at once."""

from __future__ import annotations

from tqdm.auto import tqdm

ENABLED = True  # set by app.run from cfg.progress


def bar(iterable=None, *, desc: str, enabled: bool = True, **kwargs):
    return tqdm(iterable, desc=desc, disable=not (ENABLED and enabled), leave=False, **kwargs)
