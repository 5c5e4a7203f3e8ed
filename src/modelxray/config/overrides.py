"""Overrides as the command line and the Python API hand them to Hydra.

A plain ``key=value`` goes to Hydra as ``++key=value``, so a key that does not exist (``foo=1``,
``quant.bits=1`` under ``quant=none``) is added and the config check names it in one line with the
valid keys (exit 2 on the command line), and a key may be added where a config leaves room for one
(a plan under ``analyzer.bitwidth.custom``); Hydra would print a multi-line "Could not override".
"""

from __future__ import annotations

import re
from pathlib import Path

# ``key=value`` with a dotted key and no prefix (+, ++, ~): a plain override, or a group choice
PLAIN_OVERRIDE = re.compile(r"^(?P<key>[A-Za-z_][\w-]*(?:\.[\w-]+)*)=")
FORCE_PREFIX = "++"  # Hydra's "set, adding the key if missing"


def forced_overrides(args: list[str], conf: Path) -> list[str]:
    """Plain ``key=value`` overrides go to Hydra as ``++key=value``, so a key that does not exist
    (``foo=1``, or ``quant.bits=1`` under ``quant=none``) is added and the config check names it in one
    line with the valid keys, exit 2, as it does for ``+foo=1``; Hydra would print a multi-line "Could
    not override" and exit 1. Costs nothing at start-up (no config is composed to look the key up).
    Group choices (``quant=int4``), Hydra's own keys and flags go as written."""
    groups = {p.name for p in conf.iterdir() if p.is_dir()}
    out = []
    for arg in args:
        match = PLAIN_OVERRIDE.match(arg)
        key = match["key"] if match else ""
        plain = match is not None and key not in groups and key.split(".")[0] != "hydra"
        out.append(FORCE_PREFIX + arg if plain else arg)
    return out
