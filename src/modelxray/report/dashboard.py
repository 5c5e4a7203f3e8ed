"""``plots/analysis_summary_dashboard.png``: one panel per stage that draws one, and one per failure."""

from __future__ import annotations

import math

from modelxray.plotting import new_figure, save


def write_dashboard(results: dict, path, title: str) -> bool:
    drawable = [r for r in results.values() if r.ok and r.source is not None and _draws_panel(r.source)]
    failed = [r for r in results.values() if not r.ok]
    count = len(drawable) + len(failed)
    if count == 0:
        return False
    ncols = min(2, count)
    fig, axes = new_figure(ncols=ncols, nrows=math.ceil(count / ncols), width=6.5, height=4.5)
    flat = [ax for row in axes for ax in row]
    i = 0
    for result in drawable:
        if result.source.panel(flat[i], result):
            i += 1
        else:
            flat[i].clear()
    for result in failed:
        flat[i].axis("off")
        last = result.error.strip().splitlines()[-1]
        text = f"{result.analyzer} FAILED\n{last[:80]}"
        flat[i].text(0.5, 0.5, text, ha="center", va="center", color="crimson", wrap=True)
        i += 1
    for ax in flat[i:]:
        ax.axis("off")
    fig.suptitle(title)
    save(fig, path)
    return True


def _draws_panel(source) -> bool:
    """Whether the presenter has a dashboard panel to draw (one axis is laid out for each)."""
    has_panel = getattr(source, "has_panel", None)
    return has_panel() if callable(has_panel) else callable(getattr(source, "panel", None))
