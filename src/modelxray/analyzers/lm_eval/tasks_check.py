"""Which lm-eval tasks a run names, found before the model loads: the offline pack and the user's
``include_path`` are indexed alone (a fraction of a second); lm-eval's own catalogue (thousands of
YAMLs, seconds) only when a task is named that neither holds. An unknown task, a YAML that does not
parse and a hub task whose data neither the hub nor the local datasets cache holds are one line each."""

from __future__ import annotations

import difflib
import functools
import os
from pathlib import Path

from modelxray.analyzers.lm_eval.offline_tasks import include_dir
from modelxray.core.errors import ConfigError


def _include_paths(cfg) -> list[str]:
    paths = [str(include_dir())]
    if cfg.include_path:
        paths.append(os.path.expanduser(cfg.include_path))
    return paths


def check_yaml(folder: str) -> None:
    """Every task YAML under ``folder`` parses (lm-eval's ``!function`` tags allowed)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    for path in sorted(Path(folder).rglob("*.yaml")):
        try:
            yaml.load(path.read_text(), Loader=Loader)  # noqa: S506 - a SafeLoader that ignores custom tags
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ConfigError("include_path", f"{path} is no YAML lm-eval can read{where}: {problem}") from None


@functools.lru_cache(maxsize=4)
def _manager(paths: tuple[str, ...], catalogue: bool):
    """A ``TaskManager`` over ``paths`` (and lm-eval's catalogue): indexed once per process, so the
    jobs of a sweep and the check before the model loads share it."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=list(paths), include_defaults=catalogue)


def task_manager(cfg):
    """lm-eval's ``TaskManager`` holding every task ``cfg.tasks`` names (the catalogue indexed only
    when needed); an unknown name is one line with the closest known ones."""
    if cfg.include_path:
        check_yaml(os.path.expanduser(cfg.include_path))
    paths = tuple(_include_paths(cfg))
    local = _manager(paths, False)
    if all(t in local.all_tasks for t in cfg.tasks):
        return local
    full = _manager(paths, True)
    for name in cfg.tasks:
        if name not in full.all_tasks:
            close = difflib.get_close_matches(name, full.all_tasks, n=3)
            hint = f"did you mean {', '.join(close)}?" if close else "see lm-eval --tasks list"
            raise ConfigError(
                "tasks", f"unknown lm-eval task {name!r}: {hint} (or add its YAML to a folder given as include_path)"
            )
    return full


def load_tasks(cfg, manager) -> dict:
    """lm-eval's task objects with their documents (``get_task_dict``): a hub task's data from the
    hub, or from the local datasets cache when the hub cannot be reached; neither is one line."""
    from lm_eval.tasks import get_task_dict

    from modelxray.data.hf_dataset import NOT_CACHED, datasets_cache_only, hub_offline

    if not hub_offline():
        return get_task_dict(cfg.tasks, manager)
    with datasets_cache_only() as cache:
        try:
            return get_task_dict(cfg.tasks, manager)
        except NOT_CACHED as exc:
            raise ConfigError(
                "tasks",
                f"{', '.join(cfg.tasks)}: a task's data is on the Hugging Face hub, which cannot be reached "
                f"(offline), and the local datasets cache ({cache}) does not hold it ({str(exc).splitlines()[0]}): "
                "run it once online, or use the offline tasks (pydoc_topic_mc, pydoc_cloze)",
            ) from None


def check_tasks(cfg) -> None:
    """Before the model loads: every task known, and every task's documents readable."""
    load_tasks(cfg, task_manager(cfg))
