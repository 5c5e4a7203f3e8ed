"""Overrides as the command line and the Python API hand them to Hydra.

A plain ``key=value`` goes to Hydra as ``++key=value``, so a key that does not exist (``foo=1``,
``quant.bits=1`` under ``quant=none``) is added and the config check names it in one line with the
valid keys (exit 2 on the command line), and a key may be added where a config leaves room for one
(a plan under ``analyzer.bitwidth.custom``); Hydra would print a multi-line "Could not override".
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from modelxray.core.errors import ConfigError

# ``key=value`` with a dotted key and no prefix (+, ++, ~): a plain override, or a group choice
PLAIN_OVERRIDE = re.compile(r"^(?P<key>[A-Za-z_][\w-]*(?:\.[\w-]+)*)=")
FORCE_PREFIX = "++"  # Hydra's "set, adding the key if missing"
# conf/ folders that are no group to choose from: site files (conf/local) and generated nodes
UNLISTED_GROUPS = ("local", "schema")


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


def check_overrides(args: list[str], conf: list[Path], multirun: bool) -> None:
    """The command line as Hydra would read it, checked before Hydra composes anything: an override it
    cannot parse, an unknown group option (``model=nope``, ``analyzer=[performance,nope]``, an empty
    ``quant=``), several values without ``-m``, a sweep with no value. Each is a ConfigError naming the
    override and the fix; Hydra would print several lines and the config search path, exit 1.
    ``conf``: the config folders searched (Hydra's own groups, ``hydra/...``, are left to Hydra)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import Glob
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    groups: dict[str, list[str]] = {}
    for folder in conf:  # the app's conf/ and a --config-dir: their options together
        for group, options in group_options(folder).items():
            groups[group] = sorted({*groups.get(group, []), *options})
    for arg in args:
        if arg.startswith("-") or "=" not in arg:
            continue  # a flag (--cfg job) or a flag's value
        key, _, value = arg.lstrip("+~").partition("=")
        try:
            (override,) = parser.parse_overrides([arg])
        except HydraException:
            _check_key_reads(parser, arg)
            raise ConfigError(
                key,
                f"the value {value!r} cannot be read as written (non-ASCII characters, parentheses, brackets "
                f"and '=' in a value need quotes): quote it, e.g. \"{key}='{value}'\"",
            ) from None
        name = override.key_or_group
        if override.is_sweep_override():
            values = [] if isinstance(override.value(), Glob) else list(override.sweep_iterator())
            if not multirun:
                raise ConfigError(
                    name,
                    f"{value!r} is several values: add -m to run one job per value, write {name}=[{value}] for "
                    f"a list, or quote it for one string: \"{name}='{value}'\"",
                )
            if not values and not isinstance(override.value(), Glob):
                raise ConfigError(name, f"the sweep {value} has no value, so no job would run; give at least one")
        else:
            value_ = override.value()
            values = value_ if isinstance(value_, list) else [value_]
        if name in groups and not name.startswith("hydra/") and not override.is_delete():
            options = groups[name]
            for choice in values:
                nested = isinstance(choice, str) and any((f / name / f"{choice}.yaml").is_file() for f in conf)
                if not isinstance(choice, str) or choice not in options and not nested:  # model=team/mine: a sub-folder
                    what = "no option given" if choice in ("", None) else f"no option {choice!r}"
                    raise ConfigError(name, f"{what}; choose one of: {', '.join(options)}")
                for empty in (f / name / f"{choice}.yaml" for f in conf):
                    if empty.is_file() and not empty.read_text(encoding="utf-8", errors="replace").strip():
                        raise ConfigError(name, f"option {choice!r} is an empty file ({empty}); fill it or remove it")


def _check_key_reads(parser, arg: str) -> None:
    """An override Hydra cannot parse because of its key (``+tracker.tags.../x=1``), not its value:
    say so, rather than advise quoting the value."""
    from hydra.errors import HydraException

    key = arg.partition("=")[0]
    try:
        parser.parse_overrides([f"{key}=0"])
    except HydraException:
        name = key.lstrip("+~")
        raise ConfigError(
            name,
            "this key cannot be read: a key is names of letters, digits, _ and - joined by dots; a name with "
            'other characters goes inside a mapping value, e.g. "tracker.tags={my-tag: 1}"',
        ) from None


def group_options(conf: Path) -> dict[str, list[str]]:
    """The config groups under ``conf`` (``analyzer``, ``hydra/launcher`` ...) with their options,
    read from the directory: no config is loaded. ``local/`` and ``schema/`` are left out."""
    groups: dict[str, list[str]] = {}
    for dirpath, dirnames, filenames in os.walk(conf):
        rel = Path(dirpath).relative_to(conf).as_posix()
        dirnames[:] = [
            d for d in dirnames if not d.startswith((".", "_")) and not (rel == "." and d in UNLISTED_GROUPS)
        ]
        options = sorted(f[: -len(".yaml")] for f in filenames if f.endswith(".yaml"))
        if rel != "." and options:
            groups[rel] = options
    return groups
