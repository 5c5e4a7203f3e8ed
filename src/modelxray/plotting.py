"""Figure helpers for the analyzers' plot modules: seaborn's readable defaults on a headless backend.

Importing this module sets nothing: ``style()`` applies the backend and theme for the duration of a
report (the writer enters it), so a notebook that imports modelxray keeps its inline plots.

``import seaborn`` imports ``scipy.stats`` for its kernel density estimate, most of a second on a
2-core machine and more than a small run spends drawing. :func:`import_seaborn` imports seaborn
with ``scipy.stats`` held back and hands seaborn a ``gaussian_kde`` that imports scipy's on first
use: the same estimate, paid for only by a figure that draws one.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import logging
import sys


@contextlib.contextmanager
def style():
    """Agg backend and seaborn's whitegrid theme while figures are drawn and saved; restored after."""
    from modelxray.core.lazy import collector_paused

    with collector_paused():
        import matplotlib
        import matplotlib.pyplot as plt

        sns = import_seaborn()

    logging.getLogger("matplotlib.category").setLevel(logging.WARNING)  # numeric-looking category labels are intended
    backend = matplotlib.get_backend()
    with plt.rc_context():
        plt.switch_backend("Agg")
        sns.set_theme(style="whitegrid", context="notebook")
        try:
            yield
        finally:
            plt.switch_backend(backend)


def import_seaborn():
    """``import seaborn``, with ``scipy.stats`` imported only when seaborn estimates a density."""
    if "seaborn" in sys.modules or "scipy.stats" in sys.modules:
        import seaborn

        return seaborn
    blocker = _HoldBack("scipy.stats")
    sys.meta_path.insert(0, blocker)
    try:
        import seaborn
    finally:
        sys.meta_path.remove(blocker)
    statistics = sys.modules.get("seaborn._statistics")
    if statistics is not None and getattr(statistics, "_no_scipy", False):
        statistics.gaussian_kde = _scipy_gaussian_kde  # scipy's estimate, as with scipy imported up front
        statistics._no_scipy = False
    return seaborn


class _HoldBack(importlib.abc.MetaPathFinder):
    """Makes one module look absent while seaborn is imported (seaborn falls back, then is told)."""

    def __init__(self, name: str):
        self.name = name

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name or fullname.startswith(self.name + "."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def _scipy_gaussian_kde(*args, **kwargs):
    from scipy.stats import gaussian_kde

    return gaussian_kde(*args, **kwargs)


def new_figure(ncols: int = 1, nrows: int = 1, width: float = 6.0, height: float = 4.2):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    return fig, axes


def save(fig, path) -> None:
    import matplotlib.pyplot as plt

    from modelxray.core.files import written_whole

    try:
        fig.tight_layout()
        fig.set_layout_engine(None)  # laid out once: with an engine left in place savefig lays it out again
        with written_whole(path) as tmp:  # a full disk leaves no cut PNG
            fig.savefig(tmp, dpi=120)
    finally:
        plt.close(fig)
