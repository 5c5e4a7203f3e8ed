"""What a config may name as code to run, checked on the composed config before Hydra builds anything.

Hydra imports and calls what a config names: ``hydra.callbacks``, ``hydra.launcher`` and
``hydra.sweeper`` are built by Hydra itself as soon as the config is composed (a callback before the
task function runs), and ``hydra.job_logging`` / ``hydra.hydra_logging`` hand ``class`` and ``()`` to
Python's logging, which imports and builds them. Any config file Hydra reads (a preset in ``conf/``,
a ``--config-dir`` folder, a ``+experiment=`` file) can set these keys, so ``torch.load`` of a pickle
or a ``logging.FileHandler`` anywhere would run before any modelxray check. ``guarded()`` checks every
config Hydra composes, right after composing and before Hydra uses it.

Allowed without asking: classes defined in modelxray's own packages (``OWN_PACKAGES``, read from
their source, never imported), the launchers, sweepers and callbacks that ship with hydra-core and
hydra-submitit-launcher (``HYDRA_CLASSES``) and the logging classes of Hydra's logging presets
(``LOGGING_CLASSES``). A user extends the list deliberately with the environment variable
``MODELXRAY_ALLOWED_TARGETS`` (comma-separated exact names, or ``pkg.*`` for the classes a package
defines): an environment variable, so that no config file can allow itself.

Left to their own checks: a config group's own ``_target_`` (``model``, ``analyzer.<name>``...) must
name a modelxray component (a Configurable, yours too) and is checked before it is built
(``core.instantiate``), and ``model.architecture`` names your model's code (``models.architecture_targets``).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.util
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from modelxray.core.errors import ConfigError

ENV_VAR = "MODELXRAY_ALLOWED_TARGETS"
OWN_PACKAGES = ("modelxray", "hydra_plugins.modelxray_launcher")
HYDRA_CLASSES = frozenset(
    {
        "hydra._internal.core_plugins.basic_launcher.BasicLauncher",
        "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
        "hydra.experimental.callbacks.LogJobReturnCallback",
        "hydra.experimental.callbacks.PickleJobInfoCallback",
        "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher",
        "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher",
        # modelxray's own, as conf/ names them: allowed without reading their source
        "modelxray.sweep.SweepSetup",
        "hydra_plugins.modelxray_launcher.launcher.LocalLauncher",
        "hydra_plugins.modelxray_launcher.launcher.SlurmLauncher",
    }
)
LOGGING_CLASSES = frozenset(
    {"logging.StreamHandler", "logging.FileHandler", "logging.NullHandler", "logging.Formatter"}
)
LOGGING_STREAMS = frozenset({"ext://sys.stdout", "ext://sys.stderr"})
LOGGING_KEYS = ("job_logging", "hydra_logging")
HYDRA_BUILT = ("callbacks", "launcher", "sweeper", *LOGGING_KEYS)  # what Hydra instantiates, or logging builds
# groups whose own _target_ core.instantiate checks (a Configurable); analyzer.<name> too
COMPONENT_GROUPS = ("model", "dataset", "quant", "reference", "train", "tracker")
USER_MODEL_CODE = ("model.architecture", "reference.architecture")  # models.architecture_targets checks these
OUTPUT_DIR_PREFIXES = ("${hydra.runtime.output_dir}/", "${hydra:runtime.output_dir}/")


def check_code(cfg: Any) -> None:
    """Every ``_target_`` Hydra or a component could build, and every class Python's logging would,
    is on the allowed list; else a ConfigError naming the key. Reads the config as written (no
    interpolation resolved) and imports nothing: a few milliseconds."""
    config = _as_written(cfg)
    user = _user_entries()
    for key, node in _mappings(config, ""):
        if "_target_" in node and not _left_to_components(key):
            _check_target(node["_target_"], f"{key}._target_" if key else "_target_", user)
    hydra = config.get("hydra", {})
    _check_env_set(hydra)
    for name in LOGGING_KEYS:
        for key, node in _mappings(hydra.get(name), f"hydra.{name}"):
            _check_logging_node(node, key, user)


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """While in effect, every config Hydra composes (the run's, a sweep's and each of its jobs', and
    for ``--cfg``) passes ``check_code`` and ``check_names`` before Hydra configures its logging or
    builds a callback, launcher or sweeper: the one method all of them go through is wrapped."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    from modelxray.config.names import check_names

    original = ConfigLoaderImpl.load_configuration

    @functools.wraps(original)
    def load_configuration(self, *args, **kwargs):
        cfg = original(self, *args, **kwargs)
        check_code(cfg)
        check_names(cfg)
        return cfg

    ConfigLoaderImpl.load_configuration = load_configuration
    try:
        yield
    finally:
        ConfigLoaderImpl.load_configuration = original


def _as_written(cfg: Any) -> dict:
    """The config as plain mappings, interpolations unresolved; of the ``hydra`` node only what Hydra
    builds or hands to logging (the rest, help texts and paths, would cost the most to convert)."""
    from omegaconf import OmegaConf

    if not OmegaConf.is_config(cfg):
        return cfg if isinstance(cfg, dict) else {}
    config = {k: _written(cfg, k) for k in cfg if k != "hydra"}
    hydra = cfg._get_node("hydra") if "hydra" in cfg else None
    if OmegaConf.is_dict(hydra):
        config["hydra"] = {k: _written(hydra, k) for k in HYDRA_BUILT if k in hydra}
        job = hydra._get_node("job") if "job" in hydra else None
        config["hydra"]["job"] = {
            "env_set": _written(job, "env_set") if OmegaConf.is_dict(job) and "env_set" in job else {}
        }
    return config


def _written(parent: Any, key: str) -> Any:
    """``parent[key]`` as written: a container as plain mappings, a leaf as its raw value."""
    from omegaconf import OmegaConf

    node = parent._get_node(key)
    return OmegaConf.to_container(node, resolve=False) if OmegaConf.is_config(node) else node._value()


def _mappings(node: Any, key: str) -> Iterator[tuple[str, dict]]:
    """Every mapping in ``node`` with its dotted key, lists entered (``_args_[0]``)."""
    if isinstance(node, dict):
        yield key, node
        for k, v in node.items():
            yield from _mappings(v, f"{key}.{k}" if key else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _mappings(v, f"{key}[{i}]")


def _leaves(node: Any, key: str) -> Iterator[tuple[str, Any]]:
    """Every value in ``node`` that is no mapping or list, with its dotted key."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, f"{key}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, f"{key}[{i}]")
    else:
        yield key, node


def _left_to_components(key: str) -> bool:
    """A group's own ``_target_`` and the user's model code have checks of their own, which allow
    your own components and model classes (docs/new_analyzer.md, docs/model_kinds.md)."""
    group, _, rest = key.partition(".")
    own = key in COMPONENT_GROUPS or group == "analyzer" and rest and "." not in rest and "[" not in rest
    return own or any(key == p or key.startswith((f"{p}.", f"{p}[")) for p in USER_MODEL_CODE)


def _check_target(target: Any, key: str, user: tuple[frozenset, tuple]) -> None:
    if not isinstance(target, str) or "${" in target:
        raise ConfigError(
            key, f"{target!r} is not a class name written out (an interpolation is not checked); write it out"
        )
    if not _allowed(target, HYDRA_CLASSES, user):
        raise ConfigError(
            key,
            f"{target!r} is code a config may not name (it would be imported and called); allowed: modelxray's "
            f"classes, Hydra's launchers, sweepers and callbacks; {_how_to_allow(target)}",
        )


def _check_logging_node(node: dict, key: str, user: tuple[frozenset, tuple]) -> None:
    """A logging config names classes by ``class`` and ``()`` (imported and built by Python's
    logging), objects by ``ext://`` (imported), and files a FileHandler opens by ``filename``."""
    for field in ("class", "()"):
        name = node.get(field)
        if name is not None and (not isinstance(name, str) or not _allowed(name, LOGGING_CLASSES, user)):
            raise ConfigError(
                f"{key}.{field}",
                f"{name!r} is no logging class a config may name (Python's logging would import and build it); "
                f"allowed: {', '.join(sorted(LOGGING_CLASSES))}; {_how_to_allow(name)}",
            )
    if "." in node:
        raise ConfigError(
            f"{key}..", "sets attributes of the built object (a FileHandler's file among them); a config may not"
        )
    for field, value in _leaves(node, key):
        if isinstance(value, str) and value.startswith("ext://") and value not in LOGGING_STREAMS:
            raise ConfigError(
                field,
                f"{value!r} names a Python object to import; a logging config may name {' or '.join(sorted(LOGGING_STREAMS))}",
            )
    filename = node.get("filename")
    if filename is not None and not _inside_run_folder(str(filename)):
        raise ConfigError(
            f"{key}.filename",
            f"{filename!r} is outside the run folder: a log file goes in it, e.g. ${{hydra.runtime.output_dir}}/job.log",
        )


def _how_to_allow(name: Any) -> str:
    return f"to run it anyway, allow it deliberately: {ENV_VAR}={name} python run.py ... (docs/reliability.md)"


def _inside_run_folder(filename: str) -> bool:
    """As Hydra's presets write it: under ``${hydra.runtime.output_dir}``, or a relative path, no ``..``."""
    rest = next((filename[len(p) :] for p in OUTPUT_DIR_PREFIXES if filename.startswith(p)), None)
    relative = rest is None and not re.match(r"^([/\\~$]|[A-Za-z]:)", filename)
    return (rest is not None or relative) and ".." not in re.split(r"[/\\]", filename)


def _check_env_set(hydra: dict) -> None:
    """``hydra.job.env_set`` sets the environment of the jobs: a config file could widen the allowed
    list for the jobs after it in a sweep."""
    env_set = (hydra.get("job") or {}).get("env_set") or {}
    if ENV_VAR in env_set:
        raise ConfigError(
            f"hydra.job.env_set.{ENV_VAR}",
            f"a config may not set {ENV_VAR}: set it in the environment of the command, deliberately",
        )


def _user_entries() -> tuple[frozenset, tuple]:
    """``MODELXRAY_ALLOWED_TARGETS``: exact names, and packages given as ``pkg.*``."""
    entries = [e.strip() for e in os.environ.get(ENV_VAR, "").split(",") if e.strip()]
    packages = tuple(e[:-2] for e in entries if e.endswith(".*"))
    return frozenset(e for e in entries if not e.endswith(".*")), packages


def _allowed(name: str, exact: frozenset, user: tuple[frozenset, tuple]) -> bool:
    user_exact, user_packages = user
    if name in exact or name in user_exact:
        return True
    return any(name.startswith(f"{p}.") and _class_of_package(name, p) for p in (*OWN_PACKAGES, *user_packages))


def _class_of_package(name: str, package: str) -> bool:
    """``name`` is a class defined in ``package`` (or re-exported from one of its modules), as its
    source says: an allowed prefix alone would pass ``modelxray.cli.os.system`` (a module's imports
    are its attributes). Nothing is imported."""
    *module, attr = parts = name[len(package) + 1 :].split(".")
    return all(p.isidentifier() for p in parts) and _defines_class(package, tuple(module), attr, 0)


def _defines_class(package: str, module: tuple[str, ...], attr: str, depth: int) -> bool:
    """Module ``module`` of ``package`` defines class ``attr`` at its top level, or imports it from a
    module of the same package that does (followed a few steps)."""
    tree = _module_tree(package, module)
    if tree is None or depth > 4:
        return False
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef) and stmt.name == attr:
            return True
        if isinstance(stmt, ast.ImportFrom):
            alias = next((a for a in stmt.names if (a.asname or a.name) == attr), None)
            source = _imported_module(package, module, stmt)
            if alias is not None and source is not None:
                return _defines_class(package, source, alias.name, depth + 1)
    return False


def _imported_module(package: str, module: tuple[str, ...], stmt: ast.ImportFrom) -> tuple[str, ...] | None:
    """The module of ``package`` a ``from X import`` reads, or None when X lies outside the package."""
    if stmt.level:
        root = _package_dir(package)
        here = module if root is not None and (root.joinpath(*module) / "__init__.py").is_file() else module[:-1]
        if stmt.level - 1 > len(here):
            return None
        return (*here[: len(here) - stmt.level + 1], *(stmt.module.split(".") if stmt.module else ()))
    source = stmt.module or ""
    if source == package:
        return ()
    return tuple(source[len(package) + 1 :].split(".")) if source.startswith(f"{package}.") else None


@functools.cache
def _package_dir(package: str) -> Path | None:
    """The folder of ``package``, found without importing it (nor its parents, but a namespace)."""
    top, *rest = package.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        folder = Path(location).joinpath(*rest)
        if (folder / "__init__.py").is_file():
            return folder
    return None


@functools.cache
def _module_tree(package: str, module: tuple[str, ...]) -> ast.Module | None:
    """The parsed source of ``package.module`` (a ``.py`` file or a package's ``__init__.py``)."""
    root = _package_dir(package)
    if root is None:
        return None
    for path in (root.joinpath(*module).with_suffix(".py") if module else None, root.joinpath(*module) / "__init__.py"):
        if path is not None and path.is_file():
            try:
                return ast.parse(path.read_text(encoding="utf-8"))
            except (OSError, SyntaxError, ValueError):
                return None
    return None
