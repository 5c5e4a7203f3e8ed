"""What the tracker classes have in common: building a callback config from the user's keyword
options, saving or returning figures, and restoring a saved tracker by class name."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from modelxray.core.errors import ConfigError


def _config(cls, owner: str, options: dict[str, Any], unused: tuple[str, ...] = (), **fixed: Any):
    """The callback config of ``owner``: the user's keyword ``options`` plus what ``owner`` sets
    itself (``fixed``). An unknown option, or one ``owner`` has no use for (``unused``: what the
    loop's arguments decide), is a ConfigError."""
    names = {f.name for f in dataclasses.fields(cls)} - set(unused) - set(fixed)
    unknown = sorted(set(options) - names)
    if unknown:
        raise ConfigError(unknown[0], f"is not an option of {owner}; options: {', '.join(sorted(names))}")
    return cls(**options, **fixed)


def _save_figures(figs: dict, save_dir: str | Path | None, rename: dict[str, str] | None = None) -> dict:
    """Save ``{file name: Figure}`` into ``save_dir`` (returns ``{name: path}``), or return the figures."""
    from modelxray.plotting import save

    if save_dir is None:
        return {(rename or {}).get(k, k): v for k, v in figs.items()}
    out_dir = Path(save_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, fig in figs.items():
        name = (rename or {}).get(name, name)
        save(fig, out_dir / name)
        paths[name] = out_dir / name
    return paths


def _load(filepath: str | Path, name: str) -> dict:
    from modelxray.learning_dynamics.state import load_state

    doc = load_state(filepath)
    if not isinstance(doc, dict) or doc.get("class") != name:
        found = doc.get("class") if isinstance(doc, dict) else type(doc).__name__
        raise ConfigError(str(filepath), f"holds a {found}, not a {name}")
    return doc


def _saved(tracker, filepath: str | Path, **kept: Any):
    """Write ``tracker`` (options, callback state and what else it ``kept``) for :func:`_restored`."""
    from modelxray.learning_dynamics.state import save_state

    doc = {
        "class": type(tracker).__name__,
        "num_classes": tracker.num_classes,
        "config": dataclasses.asdict(tracker.config),
        "callback": tracker.callback.state_dict(),
    }
    return save_state(filepath, {**doc, **kept})


def _restored(cls, filepath: str | Path, config_cls, callback_cls) -> tuple[Any, dict]:
    """A tracker of class ``cls`` saved by its ``save``, with its saved options and callback state,
    and the saved document (for what else the class kept)."""
    doc = _load(filepath, cls.__name__)
    new = cls(doc["num_classes"])
    new.config = config_cls(**doc["config"])
    new.callback = callback_cls(new.config)
    new.callback.load_state_dict(doc["callback"])
    return new, doc
