"""A bad value on the command line, found before Hydra composes the config.

Composing the whole config reads and merges some 28 files (about a third of a second on 2 cores),
most of a bad value's time to its one-line error. A value the command line sets for a component
(``dataset.seq_len=-1``, ``analyzer.performance.batch_size=0``) or a top-level setting (``threads=0``)
is checked here first: the component is built from its schema's defaults, then its option's file,
then the command line, which is what composing gives under these conditions: every chosen option's
file starts from its schema alone (no other defaults, no package header) and holds plain values (no
interpolation), and the command line names no preset (``experiment=``, ``debug=``) and no flag
(another config folder or name, a sweep, ``--cfg``, ``--help``). Elsewhere this module stays quiet.
Only an error about a key the command line set is reported here; anything else is left to the check
after composing, which reports the same line.
Hydra offers no way to compose one group alone without its own config, hence this module.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from modelxray.core.errors import ConfigError

_SCHEMA_PREFIX = "/schema/"


def check_values_early(args: list[str], conf: Path) -> None:
    """Raise the ConfigError the full check would raise for a value set on the command line, where
    that is known without composing (see the module docstring); return quietly otherwise."""
    if any(a.startswith("-") for a in args):  # --cfg and --help print the config unchecked; -m sweeps
        return
    plan = _read_command_line([a for a in args if "=" in a], conf)
    if plan is None or not plan[1]:
        return
    choices, values = plan
    files = _option_files(choices, conf)
    if files is None:  # an option sets another group's choice or keys, or builds on another option
        return
    for group, settings in values.items():
        if group == "":
            _check_settings(settings)
        elif group in files:  # analyzer.<name> of an analyzer not chosen: the full check says so
            node = _schema_defaults(*files[group])
            for path, value in settings:
                _set(node, path, value)
            _build(node, group, [p for p, _ in settings])


def _read_command_line(overrides: list[str], conf: Path) -> tuple[dict, dict] | None:
    """The group choices and the values per component (``""``: the top-level settings); None where
    this module cannot tell what composing would give."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from modelxray.config.settings import GROUPS

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception:  # noqa: BLE001 - check_overrides reported what it must; the rest is Hydra's
        return None
    choices, values = _default_choices(conf), {}
    if choices is None:
        return None
    other_groups = {p.name for p in conf.iterdir() if p.is_dir()} - set(GROUPS)
    for override in parsed:
        key = override.key_or_group
        head, _, rest = key.partition(".")
        if override.is_delete() or override.is_sweep_override() or override.package is not None:
            return None
        if any(part.isdigit() for part in key.split(".")):  # an item of a list (seeds.0=...)
            return None
        if head == "hydra" or head.startswith("hydra/"):
            continue
        if head in other_groups:  # a preset sets keys of other groups
            return None
        value = override.value()
        if _has_interpolation(value):
            return None
        if key in GROUPS:
            choices[key] = value
        elif head in GROUPS:
            if head == "analyzer":  # analyzer.<name>.<key>: that analyzer's node
                name, _, rest = rest.partition(".")
                head = f"analyzer.{name}"
            if not rest:
                return None
            values.setdefault(head, []).append((rest, value))
        else:
            values.setdefault("", []).append((key, value))
    return choices, values


def _default_choices(conf: Path) -> dict[str, Any] | None:
    """The group choices of ``conf/config.yaml``'s defaults; None where it sets values of its own
    beside Hydra's (a changed primary config)."""
    from modelxray.config.settings import GROUPS

    config = _load(conf / "config.yaml")
    if config is None or set(config) - {"defaults", "hydra"}:
        return None
    choices = {}
    for entry in config.get("defaults") or []:
        if isinstance(entry, dict) and len(entry) == 1:
            ((group, option),) = entry.items()
            if group in GROUPS:
                choices[group] = option
    return choices


def _option_files(choices: dict[str, Any], conf: Path) -> dict[str, tuple[str, str, dict]] | None:
    """Per chosen component (``analyzer.<name>`` for each analyzer): its schema's group and name and
    its file's values; None where any chosen option's file is more than its schema and plain values
    (it could change another group's choice or keys, which only composing tells)."""
    from modelxray.core.schema import SCHEMA

    files = {}
    for head, chosen in choices.items():
        if chosen is None:  # the group left out
            continue
        options = [chosen] if head != "analyzer" or isinstance(chosen, str) else chosen
        for option in options:
            if not isinstance(option, str) or "/" in option:
                return None
            package = option if head == "analyzer" else "_here_"
            path = conf / head / f"{option}.yaml"
            if not path.is_file() or "@package" in path.read_text(encoding="utf-8", errors="replace")[:512]:
                return None
            content = _load(path)
            if content is None or _has_interpolation(content):
                return None
            defaults = content.pop("defaults", None)
            if not (isinstance(defaults, list) and len(defaults) == 2 and defaults[1] == "_self_"):
                return None
            schema, _, at = str(defaults[0]).partition("@")
            schema_group, _, schema_name = schema.removeprefix(_SCHEMA_PREFIX).partition("/")
            plain = schema.startswith(_SCHEMA_PREFIX) and schema_group == head and at == package
            if not plain or schema_name not in SCHEMA.get(head, {}) or (head == "analyzer" and content):
                return None
            files[f"analyzer.{option}" if head == "analyzer" else head] = (head, schema_name, content)
    return files


def _schema_defaults(group: str, name: str, content: dict) -> dict:
    """The node composing gives: the schema's defaults, then the option file's values."""
    from modelxray.core.schema import SCHEMA, schema_node

    node = schema_node(SCHEMA[group][name])
    _merge(node, content)
    return node


def _build(node: dict, group: str, set_keys: list[str]) -> None:
    """Build the component as the full check does; raise its error where it names a key the command
    line set (``seq_len`` of ``dataset.seq_len=-1``)."""
    from modelxray.core.configurable import Configurable
    from modelxray.core.instantiate import unknown_key
    from modelxray.core.schema import load_class

    target = node.pop("_target_")
    try:
        cls = load_class(target)
    except Exception:  # noqa: BLE001 - the full check names an import failure
        return
    if not (dataclasses.is_dataclass(cls) and issubclass(cls, Configurable)):
        return
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(node) - fields)
    if unknown:  # the full check names the first, in sorted order
        if _names_a_set_key(unknown[0], set_keys):
            raise unknown_key(f"{group}.{unknown[0]}", cls, fields)
        return
    if any(v == "???" for v in node.values()):
        return
    try:
        cls(**node)
    except ConfigError as exc:
        if _names_a_set_key(exc.key, set_keys):
            raise exc.under(group) from None
    except Exception:  # noqa: BLE001 - a check that needs more than the node: the full check says it
        return


def _check_settings(settings: list[tuple[str, Any]]) -> None:
    """The top-level settings (``seed``, ``threads``, ``runtime.*`` ...): their schema's defaults and the
    command line's values, as ``conf/config.yaml`` sets none of its own."""
    from modelxray.config.settings import run_settings, top_level_keys, unknown_top_level_key

    unknown = sorted({path.split(".")[0] for path, _ in settings} - top_level_keys())
    if unknown:  # the full check's first word on them
        raise unknown_top_level_key(unknown[0])
    config: dict[str, Any] = {}
    for path, value in settings:
        _set(config, path, value)
    try:
        run_settings(config)
    except ConfigError as exc:
        if _names_a_set_key(exc.key, [p for p, _ in settings]):
            raise
    except Exception:  # noqa: BLE001 - the full check says it
        return


def _names_a_set_key(key: str, set_keys: list[str]) -> bool:
    return any(key == p or key.startswith(p + ".") or p.startswith(key + ".") for p in set_keys)


def _set(node: dict, path: str, value: Any) -> None:
    """``++a.b=value`` as Hydra applies it: a mapping merges into a mapping, anything else replaces."""
    *parents, last = path.split(".")
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    if isinstance(value, dict) and isinstance(node.get(last), dict):
        _merge(node[last], value)
    else:
        node[last] = value


def _merge(into: dict, other: dict) -> None:
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def _has_interpolation(value: Any) -> bool:
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, dict):
        return any(_has_interpolation(k) or _has_interpolation(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_interpolation(v) for v in value)
    return False


def _load(path: Path) -> dict | None:
    """A YAML file as OmegaConf reads it (its float and key rules), as plain containers."""
    from omegaconf import DictConfig, OmegaConf

    try:
        cfg = OmegaConf.load(path)
    except Exception:  # noqa: BLE001 - composing reports a file it cannot read
        return None
    return OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else None
