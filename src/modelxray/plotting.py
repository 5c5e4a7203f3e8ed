"""Figure helpers for the analyzers' plot modules: seaborn's readable defaults on a headless backend.

Importing this module sets nothing: ``style()`` applies the backend and theme for the duration of a
report (the writer enters it), so a notebook that imports modelxray keeps its inline plots.
"""

from __future__ import annotations

import contextlib
import logging


@contextlib.contextmanager
def style():
    """Agg backend and seaborn's whitegrid theme while figures are drawn and saved; restored after."""
    import matplotlib
    import matplotlib.pyplot as plt
    import seaborn as sns

    logging.getLogger("matplotlib.category").setLevel(logging.WARNING)  # numeric-looking category labels are intended
    backend = matplotlib.get_backend()
    with plt.rc_context():
        plt.switch_backend("Agg")
        sns.set_theme(style="whitegrid", context="notebook")
        try:
            yield
        finally:
            plt.switch_backend(backend)


def new_figure(ncols: int = 1, nrows: int = 1, width: float = 6.0, height: float = 4.2):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    return fig, axes


def save(fig, path) -> None:
    import matplotlib.pyplot as plt

    from modelxray.core.files import written_whole

    try:
        fig.tight_layout()
        with written_whole(path) as tmp:  # a full disk leaves no cut PNG
            fig.savefig(tmp, dpi=120)
    finally:
        plt.close(fig)
