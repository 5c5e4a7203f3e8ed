"""One composition of the config for a single run, where Hydra makes two.

Before a run, Hydra composes the whole config once only to read ``hydra.mode`` (``Hydra.get_mode``,
in multirun mode, discarding the result), then composes it again to run it: about a third of a second
each on a 2-core machine, the largest part of a bad value's time to its one-line error. Here the mode
is read from a run-mode composition that the run then uses; where that composition fails (sweep
values in a config that sets ``hydra.mode: MULTIRUN``), Hydra's own ``get_mode`` answers as before.
Nothing in Hydra offers this (its ``get_mode`` is not configurable), hence the patch, scoped to
``composing_once()``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator

RUN_OVERRIDE = "hydra.mode=RUN"  # what Hydra adds to a run's overrides when the config names no mode


@contextlib.contextmanager
def composing_once() -> Iterator[None]:
    """While in effect, a run's config is composed once: ``get_mode`` keeps its run-mode composition
    for the ``compose_config`` call of ``Hydra.run`` with the same config name and overrides."""
    from hydra._internal import hydra as hydra_module
    from hydra._internal.hydra import Hydra
    from hydra.types import RunMode

    original_get_mode, original_compose = Hydra.get_mode, Hydra.compose_config
    kept: dict[int, tuple] = {}

    @functools.wraps(original_get_mode)
    def get_mode(self, config_name, overrides):
        try:
            cfg = original_compose(self, config_name, list(overrides), run_mode=RunMode.RUN)
        except Exception:  # Hydra's way, which reads the mode of a config a run cannot compose
            return original_get_mode(self, config_name, overrides)
        mode = cfg.hydra.mode
        if mode is None:  # Hydra then runs it with the override hydra.mode=RUN: the composed config as that gives it
            cfg.hydra.mode = RunMode.RUN
            cfg.hydra.overrides.hydra.append(RUN_OVERRIDE)
            kept[id(self)] = (config_name, [*overrides, RUN_OVERRIDE], cfg)
        return mode

    @functools.wraps(original_compose)
    def compose_config(self, config_name, overrides, run_mode, with_log_configuration=False, **kwargs):
        name, same_overrides, cfg = kept.pop(id(self), (None, None, None))
        if cfg is None or run_mode != RunMode.RUN or (name, same_overrides) != (config_name, list(overrides)):
            return original_compose(self, config_name, overrides, run_mode, with_log_configuration, **kwargs)
        if with_log_configuration:  # what Hydra's compose_config does after loading
            hydra_module.configure_log(cfg.hydra.hydra_logging, cfg.hydra.verbose)
            hydra_module.log = logging.getLogger(hydra_module.__name__)
            self._print_debug_info(config_name, overrides, run_mode)
        return cfg

    Hydra.get_mode, Hydra.compose_config = get_mode, compose_config
    try:
        yield
    finally:
        Hydra.get_mode, Hydra.compose_config = original_get_mode, original_compose
