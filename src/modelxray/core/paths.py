"""Where the Hydra configs live: ``conf/`` of a source checkout, or a wheel's bundled copy."""

from __future__ import annotations

import os
from pathlib import Path


def conf_dir() -> Path:
    env = os.environ.get("MODELXRAY_CONF")
    candidates = [Path(env)] if env else []
    package = Path(__file__).resolve().parents[1]  # src/modelxray
    candidates += [package.parents[1] / "conf", package / "_conf"]
    for c in candidates:
        if (c / "config.yaml").is_file():
            return c
    raise FileNotFoundError(
        f"no modelxray config directory found (looked in {', '.join(map(str, candidates))}); "
        "set MODELXRAY_CONF to your conf/ directory"
    )
