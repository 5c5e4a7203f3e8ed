"""Number formatting shared by the text reports, the Markdown writer and the figures, and the name
a module goes by in them."""

from __future__ import annotations

from typing import Any


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def listed(items, n: int = 3) -> str:
    """The first ``n`` items joined with commas, and how many more there are: "a, b, c and 4 more"."""
    items = list(items)
    return ", ".join(map(str, items[:n])) + (f" and {len(items) - n} more" if len(items) > n else "")


def fmt_number(v: Any) -> str:
    """A table cell: 4 significant decimals, thousands separators, scientific for tiny and huge."""
    if isinstance(v, float):
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            return f"{v:.4g}"
        return f"{v:,.4f}".rstrip("0").rstrip(".") if abs(v) < 1000 else f"{v:,.1f}"
    return str(v)


def type_name(module: Any) -> str:
    """The module's class name; a TorchScript module keeps it as ``original_name``."""
    return getattr(module, "original_name", None) or type(module).__name__
