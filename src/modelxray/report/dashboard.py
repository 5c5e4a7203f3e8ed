"""``plots/analysis_summary_dashboard.png``: one panel per analyzer that ran."""

from __future__ import annotations

import math

from modelxray.report.plots import plotter_for
from modelxray.report.plots.style import new_figure, save


def write_dashboard(results: dict, path, title: str) -> bool:
    panels = [(name, r, plotter_for(name)) for name, r in results.items()]
    panels = [(n, r, p) for n, r, p in panels if p is not None and hasattr(p, "panel")]
    ncols = min(2, max(1, len(panels) + sum(1 for r in results.values() if not r.ok)))
    count = len(panels) + sum(1 for r in results.values() if not r.ok)
    if count == 0:
        return False
    nrows = math.ceil(count / ncols)
    fig, axes = new_figure(ncols=ncols, nrows=nrows, width=6.5, height=4.5)
    flat = [ax for row in axes for ax in row]
    i = 0
    for name, result, plotter in panels:
        if result.ok:
            plotter.panel(flat[i], result)
            i += 1
    for name, result in results.items():
        if not result.ok:
            flat[i].axis("off")
            last = result.error.strip().splitlines()[-1]
            flat[i].text(0.5, 0.5, f"{name} FAILED\n{last[:80]}", ha="center", va="center", color="crimson", wrap=True)
            i += 1
    for ax in flat[i:]:
        ax.axis("off")
    fig.suptitle(title)
    save(fig, path)
    return True
