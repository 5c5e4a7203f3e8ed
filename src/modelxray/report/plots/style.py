"""Shared figure style: seaborn's readable defaults, headless backend, byte formatting."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import logging  # noqa: E402

logging.getLogger("matplotlib.category").setLevel(logging.WARNING)  # numeric-looking category labels are intended

import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

sns.set_theme(style="whitegrid", context="notebook")


def new_figure(ncols: int = 1, nrows: int = 1, width: float = 6.0, height: float = 4.2):
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    return fig, axes


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def save(fig, path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
