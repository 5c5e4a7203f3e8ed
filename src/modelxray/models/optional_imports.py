"""Keep libraries a run does not use out of its start-up.

Why: transformers imports optional libraries at import time whenever they are installed, though a
run uses them only for one feature: hqq's quantizer (for a quantized KV cache; hqq compiles functions
with ``torch.compile`` when its module is defined), torchao's safetensors support (to save torchao-
quantized checkpoints) and scipy's ``linear_sum_assignment`` (the matching of detection losses, used
only in training). Together about 3-5 s of CPU before any model loads, on every run, against a few
hundred milliseconds for the model code itself. ``optional_libraries_on_use`` imports those
transformers modules with each library reported absent, then binds the names they would have
imported to stand-ins that import the library on first use, and gives the modules their real
availability check back: every feature still works, and a run that never uses one never pays for it.
No library offers this (transformers has no switch for it), hence this module. Nothing changes when
transformers' modules were imported before.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from modelxray.core.lazy import collector_paused

# library's availability check in transformers.utils -> the transformers modules that import it at
# import time, and the names each binds from it (name -> the library module it comes from)
ON_USE: dict[str, dict[str, dict[str, str]]] = {
    "is_hqq_available": {"transformers.cache_utils": {"HQQQuantizer": "hqq.core.quantize:Quantizer"}},
    "is_torchao_available": {
        "transformers.quantizers.quantizer_torchao": {
            "flatten_tensor_state_dict": "torchao.prototype.safetensors.safetensors_support:flatten_tensor_state_dict"
        }
    },
    "is_scipy_available": {
        f"transformers.loss.{name}": {"linear_sum_assignment": "scipy.optimize:linear_sum_assignment"}
        for name in (
            "loss_for_object_detection",
            "loss_deformable_detr",
            "loss_grounding_dino",
            "loss_lw_detr",
            "loss_rf_detr",
            "loss_rt_detr",
        )
    },
}
# importing these imports every module of ON_USE (the loss modules through loss_utils)
ENTRY_MODULES = ("transformers.cache_utils", "transformers.quantizers", "transformers.loss.loss_utils")


class OnUse:
    """A stand-in for ``module:attr`` that imports it when first called or asked for an attribute."""

    def __init__(self, spec: str) -> None:
        self._spec = spec
        self._target: Any = None

    def _resolve(self) -> Any:
        if self._target is None:
            module, _, attr = self._spec.partition(":")
            self._target = getattr(importlib.import_module(module), attr)
        return self._target

    def __call__(self, *args, **kwargs):
        return self._resolve()(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._resolve(), name)

    def __repr__(self) -> str:
        return f"<{self._spec}, imported on first use>"


def optional_libraries_on_use() -> None:
    """Import transformers' modules of ``ON_USE`` with their optional libraries deferred (once per
    process; nothing is done when transformers' model code was imported already)."""
    if any(m in sys.modules for m in ENTRY_MODULES) or "transformers.modeling_utils" in sys.modules:
        return
    import transformers.utils as utils
    import transformers.utils.import_utils as import_utils

    real = {check: getattr(import_utils, check) for check in ON_USE}
    installed = {check: bool(found()) for check, found in real.items()}
    for check in ON_USE:
        setattr(utils, check, _absent)
        setattr(import_utils, check, _absent)
    try:
        with collector_paused():  # transformers' model code: seconds of imports
            for module in ENTRY_MODULES:
                importlib.import_module(module)
    finally:
        for check, found in real.items():
            setattr(utils, check, found)
            setattr(import_utils, check, found)
    for check, modules in ON_USE.items():
        for name, names in modules.items():
            module = sys.modules.get(name)
            if module is None:
                continue
            if getattr(module, check, None) is _absent:
                setattr(module, check, real[check])
            if installed[check]:
                for attr, spec in names.items():
                    if not hasattr(module, attr):
                        setattr(module, attr, OnUse(spec))


def _absent(*_args, **_kwargs) -> bool:
    return False
