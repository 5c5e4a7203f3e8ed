"""Run names a person reads in MLflow's runs table and compare view: the model, the analyzers, the
quantization and each value the command set (``smollm2 perf int4 g64``).

Two commands that differ get different names: every override's value is in the name, and a name that
had to drop or shorten something ends with a short fingerprint of the overrides. The full override
string stays in the run's ``modelxray.overrides`` tag.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

ANALYZER_SHORT = {
    "performance": "perf",
    "quant_impact": "qimpact",
    "bitwidth": "bits",
    "robustness": "robust",
    "learning_dynamics": "dynamics",
    "inspect": "inspect",
}
# keys shown as a prefix glued to their value (``quant.group_size=64`` -> ``g64``)
KEY_SHORT = {
    "group_size": "g",
    "bits": "w",
    "max_tokens": "tok",
    "seq_len": "len",
    "seed": "seed",
    "dtype": "",
    "lr": "lr",
    "weight_decay": "wd",
    "steps": "steps",
}
# group choices already shown by their own part of the name, or that say nothing about the result
SHOWN_GROUPS = ("model", "quant", "analyzer", "experiment", "train", "debug")
SILENT_KEYS = ("tracker", "hydra", "runtime", "progress", "threads", "model_cache_size", "report")
MAX_CHARS = 64
MAX_VALUE_CHARS = 24


def run_name(choices: dict[str, str], overrides: list[str], config: dict[str, Any], swept: tuple[str, ...] = ()) -> str:
    """The readable name of a run made by ``overrides`` (Hydra's group ``choices``, the resolved
    ``config``); the values of ``swept`` keys (what tells a sweep's jobs apart) come first, so a
    shortened name keeps them."""
    parts: list[str] = []
    lossy = False
    experiment = choices.get("experiment")
    if experiment and experiment != "null":
        parts.append(experiment)
    parts.append(model_label(choices.get("model", ""), config.get("model") or {}))
    analyzers = list((config.get("analyzer") or {}).keys())
    parts.extend(ANALYZER_SHORT.get(a, a) for a in analyzers)
    quant = choices.get("quant", "none")
    if quant not in ("none", ""):
        parts.append(quant)
    train = choices.get("train", "none")
    if train not in ("none", ""):
        parts.append(train)
    debug = choices.get("debug")
    if debug and debug != "null":
        parts.append(f"debug-{debug}")
    first = [o for o in overrides if o.lstrip("+~").partition("=")[0] in swept]
    lead = []  # what tells a sweep's jobs apart, first: a name cut short keeps it
    for override in first:
        key = override.lstrip("+~").partition("=")[0]
        if key == "quant":
            label = f"quant={quant}" if quant in ("none", "") else quant  # the baseline job names its quant too
        elif key == "model":
            label = parts[1 if experiment and experiment != "null" else 0]
        elif key in ("train", "experiment"):
            label = choices.get(key, "")
        elif key == "analyzer":
            label = " ".join(ANALYZER_SHORT.get(a, a) for a in analyzers)
        else:
            label, dropped = override_label(override)
            lossy |= dropped
        if label and label not in lead:
            lead.append(label)
    parts = lead + [p for p in parts if p not in lead]
    for override in [o for o in overrides if o not in first]:
        label, dropped = override_label(override)
        lossy |= dropped
        if label and label not in parts:
            parts.append(label)
    name = " ".join(p for p in parts if p)
    if len(name) > MAX_CHARS:
        name, lossy = name[: MAX_CHARS - 6].rstrip(), True
    if lossy and overrides:
        name += " ~" + hashlib.sha256(" ".join(overrides).encode()).hexdigest()[:4]
    return name


def model_label(choice: str, model: dict[str, Any]) -> str:
    """A model's short name: the config's name, or for ``hf``/``file`` the last part of its path."""
    for key in ("name_or_path", "path"):
        value = model.get(key)
        if choice in ("hf", "file", "") and isinstance(value, str) and value and value != "???":
            return _basename(value)
    return choice or "model"


def override_label(override: str) -> tuple[str, bool]:
    """``quant.group_size=64`` -> (``g64``, False); the bool says something was left out or cut."""
    key, _, value = override.lstrip("+~").partition("=")
    top = key.split(".")[0].split("@")[0]
    if top in SILENT_KEYS:
        return "", False  # where runs are logged and how they show progress: not what they measure
    if "." not in key and top in SHOWN_GROUPS:
        return "", False  # the group's own part of the name shows it
    if "." not in key and top == "dataset":
        return value, False
    leaf = key.rsplit(".", 1)[-1]
    if top == "model" and leaf in ("name_or_path", "path"):
        return "", False  # the model's part of the name shows it
    shown, cut = _value(value)
    short = KEY_SHORT.get(leaf)
    label = f"{short}{shown}" if short is not None else f"{leaf}={shown}"
    return label, cut


def _value(value: str) -> tuple[str, bool]:
    value = value.strip("'\"")
    if value in ("True", "False", "None"):  # as YAML writes them
        value = {"True": "true", "False": "false", "None": "null"}[value]
    if "/" in value and not value.startswith("["):
        value = _basename(value)
    value = re.sub(r"\s+", "", value)
    if len(value) > MAX_VALUE_CHARS:
        return value[: MAX_VALUE_CHARS - 1] + "…", True
    return value, False


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]
