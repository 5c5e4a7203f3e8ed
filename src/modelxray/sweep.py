"""Hydra callback run on the submitting host when a sweep (``-m``) starts, before any job launches.

It gives the sweep an id (``MODELXRAY_SWEEP_ID``: the environment reaches local, submitit_local and
SLURM jobs, which tag their MLflow runs with it) and prepares the tracking store once: the SQLite
schema and the experiment are created here, so parallel jobs never race to create them. A store that
cannot work (an unwritable SQLite folder, a dead server) stops the sweep here with one line, before
any job is sent, instead of failing every job."""

from __future__ import annotations

import os
import sys
import uuid
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

SWEEP_ID_ENV = "MODELXRAY_SWEEP_ID"


class SweepSetup(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        os.environ[SWEEP_ID_ENV] = uuid.uuid4().hex[:12]
        tracker_cfg = config.get("tracker")
        if tracker_cfg is None or "MlflowTracker" not in str(tracker_cfg.get("_target_", "")):
            return
        from modelxray.core.errors import ConfigError
        from modelxray.core.instantiate import build_component

        try:
            tracker = build_component(tracker_cfg, "tracker")
        except ConfigError:
            return  # each job reports the bad key itself, with the job's own overrides
        if "tracker" not in swept_keys(config):
            try:  # a store that cannot work stops the sweep once, before any job is sent
                tracker.check()
            except ConfigError as exc:
                print(f"modelxray: error: {exc}", file=sys.stderr)
                raise SystemExit(2) from None
        tracker.prepare()


def swept_keys(config: DictConfig) -> set[str]:
    """Top-level keys the sweep varies (``tracker.uri=a,b`` -> ``tracker``): those are checked per job."""
    swept = set()
    for override in config.hydra.overrides.task:
        key, _, value = str(override).lstrip("+~").partition("=")
        if "," in value or value.startswith(("choice(", "range(", "glob(", "interval(")):
            swept.add(key.split(".")[0])
    return swept
