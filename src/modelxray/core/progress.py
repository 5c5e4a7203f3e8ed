"""Progress bars (tqdm). Whether they show is a value passed down from the run's ``progress`` key
(``RunContext.progress``), never a module global."""

from __future__ import annotations


def bar(iterable=None, *, desc: str, enabled: bool = True, **kwargs):
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, disable=not enabled, leave=False, **kwargs)
