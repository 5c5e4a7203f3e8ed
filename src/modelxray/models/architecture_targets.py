"""What a ``_target_`` in a model architecture may name: an ``nn.Module`` class or a model factory.

A ``_target_`` imports and calls what it names, so a config file could run anything (``torch.load`` of
a pickle, ``builtins.open``). Checked when the config is validated, before anything is built; torch is
imported only when a class must be checked, so the refusal of a function takes a fraction of a second.
"""

from __future__ import annotations

from typing import Any

from modelxray.core.errors import ConfigError

MODEL_FACTORIES = ("torchvision.models.", "timm.")


def check_targets(node: Any, key: str, trust_remote_code: bool) -> None:
    """Every ``_target_`` in ``node`` (nested ones too: Hydra builds them all) names an ``nn.Module``
    class, or a model factory of ``MODEL_FACTORIES``; anything else (``torch.load``, ``builtins.open``)
    runs code a config file should not, and needs ``model.trust_remote_code=true``. One line, before
    anything is built."""
    import inspect

    from hydra.utils import get_object

    if isinstance(node, dict):
        target = node.get("_target_")
        if target is not None and not trust_remote_code:
            try:
                obj = get_object(str(target))
            except Exception as exc:  # noqa: BLE001 - an import failure is the user's bad name
                raise ConfigError(f"{key}._target_", f"cannot import {target!r}: {exc}") from None
            factory = inspect.isfunction(obj) and f"{obj.__module__}.".startswith(MODEL_FACTORIES)
            if not (factory or inspect.isclass(obj) and _is_module_class(obj)):
                raise ConfigError(
                    f"{key}._target_",
                    f"{target!r} is not an nn.Module class or a model factory ({', '.join(MODEL_FACTORIES)}); "
                    "a _target_ imports and runs what it names: set model.trust_remote_code=true to allow it",
                )
        for k, v in node.items():
            check_targets(v, f"{key}.{k}" if k != "_target_" else key, trust_remote_code)
    elif isinstance(node, (list, tuple)):
        for i, v in enumerate(node):
            check_targets(v, f"{key}[{i}]", trust_remote_code)


def _is_module_class(obj: type) -> bool:
    import torch

    return issubclass(obj, torch.nn.Module)
