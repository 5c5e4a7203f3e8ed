"""``model.device_map``: accelerate's placement of a model's modules over GPUs, the CPU and disk, for a
model that fits no single device. transformers hands the map to accelerate when it loads the model;
this module checks the map before any weight is read and says where the modules went."""

from __future__ import annotations

from collections import Counter

from modelxray.core.errors import ConfigError

STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")  # accelerate's own placements
DEVICES = ("cpu", "disk", "mps", "cuda")  # and cuda:N, or a GPU's index


def check_device_map(value, device: str) -> None:
    """One line naming what is wrong with ``model.device_map`` (a strategy, or ``{module: device}``)."""
    if value is None:
        return
    if device != "auto":
        raise ConfigError("model.device_map", f"places the model itself: leave model.device=auto (got {device!r})")
    if isinstance(value, str):
        if value not in STRATEGIES:
            raise ConfigError(
                "model.device_map",
                f"must be one of {', '.join(STRATEGIES)} or a mapping of module name to device; got {value!r}",
            )
        return
    if not isinstance(value, dict) or not value:
        raise ConfigError(
            "model.device_map", f"must be one of {', '.join(STRATEGIES)} or a mapping of module name to device"
        )
    import torch

    for module, where in value.items():
        gpu = isinstance(where, int) or str(where).startswith("cuda")
        known = gpu and (isinstance(where, int) or where == "cuda" or str(where)[5:].isdigit())
        if not known and where not in DEVICES:
            raise ConfigError(
                f"model.device_map.{module}", f"must be cpu, disk, cuda, cuda:N or a GPU's index; got {where!r}"
            )
        if gpu and not torch.cuda.is_available():
            raise ConfigError(
                f"model.device_map.{module}",
                f"puts {module or 'the model'} on {where}, but this machine has no CUDA GPU",
            )


def on_disk(value) -> bool:
    """Whether a map places a module on disk (known before loading only for a mapping)."""
    return isinstance(value, dict) and "disk" in value.values()


def placements(model) -> dict[str, int]:
    """Modules per device as accelerate placed them (``hf_device_map``); {} when it placed nothing."""
    placed = getattr(model, "hf_device_map", None) or {}
    return dict(Counter(str(v) for v in placed.values()))


def offloaded(model) -> list[str]:
    """The modules whose weights accelerate offloaded (to disk, or to the CPU beside a GPU): meta
    tensors between forwards, read in at each one."""
    placed = getattr(model, "hf_device_map", None) or {}
    out = []
    for name in placed:
        module = model.get_submodule(name) if name else model
        if any(p.is_meta for p in module.parameters()):
            out.append(name or "the model")
    return out
