"""Names in a config that become file or folder names, or MLflow names that must not read as paths.

``hydra.job.name`` names the job's log file (``<run folder>/<name>.log``): ``../../x`` would write it
two folders above the run folder; an analyzer's name names its files (``errors/<name>_traceback.txt``);
``hydra.output_subdir`` and ``hydra.sweep.subdir`` are folders inside the run or sweep folder. MLflow
refuses a tag name that would resolve to another name as a path (``../x``), but only when the run
starts, after the model loaded. Each is refused in one line while the config is read.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from modelxray.core.errors import ConfigError

# (key, what the name becomes): a plain name, no path separator, no '..'
# (``tracker.run_name`` is no path: MLflow keeps it as a tag's value; ``tracker.experiment`` becomes a
# folder only through mlflow_store.folder_name, which keeps letters, digits, '.', '_' and '-')
PLAIN_NAMES = (("hydra.job.name", "the job log's file name, <run folder>/<name>.log"),)
# (key, what the path is relative to): a relative path that stays inside it
INNER_PATHS = (
    ("hydra.output_subdir", "the run folder"),
    ("hydra.sweep.subdir", "the sweep folder"),
)
MLFLOW_NAME = re.compile(r"^[/\w.\- :]*$")  # what MLflow accepts in a tag name (mlflow.utils.validation)


def check_names(cfg: Any) -> None:
    """Every name of ``cfg`` that becomes a path, or an MLflow name, is refused in one ConfigError
    naming its key when it could leave its folder (``/``, ``\\``, ``..``) or MLflow would refuse it."""
    for key, what in PLAIN_NAMES:
        value = _value(cfg, key)
        if value is not None and _not_plain(str(value)):
            raise ConfigError(
                key, f"{str(value)!r} holds a path separator or '..' (it becomes {what}); use a plain name"
            )
    for key, within in INNER_PATHS:
        value = _value(cfg, key)
        if value is not None and _leaves_folder(str(value)):
            raise ConfigError(
                key, f"{str(value)!r} leaves {within} ('..' or an absolute path); name a folder inside it"
            )
    for name in _keys(cfg, "analyzer"):
        if _not_plain(name):
            raise ConfigError(
                f"analyzer.{name}",
                "an analyzer's name holds a path separator or '..' (it names its files); use a plain name",
            )
    for name in _keys(cfg, "tracker.tags"):
        _check_tag_name(name)


def _not_plain(name: str) -> bool:
    return "/" in name or "\\" in name or ".." in name


def _leaves_folder(path: str) -> bool:
    """An absolute path, a home-relative one, or one with a '..' part."""
    return bool(re.match(r"^([/\\~]|[A-Za-z]:)", path)) or ".." in re.split(r"[/\\]", path)


def _check_tag_name(name: str) -> None:
    """MLflow's rule for a tag name, checked before the model loads rather than when the run starts."""
    norm = posixpath.normpath(name)
    if not name or not MLFLOW_NAME.match(name) or norm != name or norm.startswith(("..", "/")):
        raise ConfigError(
            f"tracker.tags.{name}",
            f"{name!r} is no tag name MLflow takes: letters, digits, _ - . : space and /, read as a path that "
            "stays where it is (no '..', no leading or doubled '/'); rename the tag",
        )


def _value(cfg: Any, key: str) -> Any:
    """``cfg``'s value at ``key``: resolved where it resolves now, as written otherwise (an
    interpolation of Hydra's runtime values), None where the key is absent."""
    from omegaconf import OmegaConf

    if not OmegaConf.is_config(cfg):
        return _plain_select(cfg, key)
    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key, default=None, throw_on_resolution_failure=False)
    if not OmegaConf.is_dict(parent) or leaf not in parent:
        return None
    try:
        return OmegaConf.select(parent, leaf, throw_on_resolution_failure=True)
    except Exception:  # noqa: BLE001 - an interpolation that resolves only once the job runs
        return parent._get_node(leaf)._value()


def _plain_select(node: Any, key: str) -> Any:
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _keys(cfg: Any, key: str) -> list[str]:
    """The keys of the mapping at ``key`` (none where it is absent or no mapping)."""
    from omegaconf import OmegaConf

    node = OmegaConf.select(cfg, key, default=None) if OmegaConf.is_config(cfg) else _plain_select(cfg, key)
    return [str(k) for k in node.keys()] if OmegaConf.is_dict(node) or isinstance(node, dict) else []
