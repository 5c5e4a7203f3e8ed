"""``modelxray.quantize``: quantize any ``nn.Module`` with a quantizer config (torchao's ``quantize_``
idea, without modifying the input)::

    import modelxray
    from modelxray.quant.weight import WeightQuantizer

    q_model, report = modelxray.quantize(model, "int4")  # an option of conf/quant/
    q_model, report = modelxray.quantize(model, WeightQuantizer(bits=4, group_size=128))
    q_model, report = modelxray.quantize(model, "gptq_int4", calibration=token_ids)  # [batch, seq]

The run's quant stage (``Quantizer.apply``) goes through the same code path with the subject's
model and the calibration windows of its dataset, so both give the same weights and report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from modelxray.core.errors import ConfigError
from modelxray.quant.base import Quantizer
from modelxray.quant.calibration import Calibration, as_calibration, subject_calibration

if TYPE_CHECKING:
    from torch import nn

    from modelxray.core.result import Result
    from modelxray.core.subject import Subject


def quantize(
    model: nn.Module, config: Any, calibration: Any = None, *, name: str | None = None
) -> tuple[nn.Module, Result | None]:
    """A quantized copy of ``model`` (which is never modified) and the ``quant`` report.

    ``config``: a quantizer (``WeightQuantizer(bits=4)``), the name of a ``quant`` config option
    (``"int4"``, ``"gptq_int4"``, ``"int8_torchao"``...) or a mapping with ``_target_``.
    ``calibration``: for the methods that calibrate (GPTQ, AWQ), token ids (a LongTensor [batch, seq])
    or a classifier's float inputs ([batch, *input_shape]), a list of them, or a DataLoader yielding
    them. ``"none"`` returns ``(model, None)``.
    ``name``: what error messages call the model (default: its class name).

    A quantizer that would quantize no module of ``model`` (e.g. ``int8`` on a TorchScript model,
    whose submodules are not nn.Linear) raises ``ConfigError`` (``quant: ...``) before any work.
    """
    quantizer = as_quantizer(config)
    return _quantize(quantizer, model, lambda: as_calibration(calibration, quantizer.name), name)


def quantize_subject(
    subject: Subject, quantizer: Quantizer, progress: bool = True, in_place: bool = False
) -> tuple[Subject, Result | None]:
    """The run's quant stage: the subject with a quantized copy of its model (``in_place``: its
    model itself, when the quantizer can), calibrated (if the method calibrates) on the windows
    after its dataset's evaluated span, or a classifier's training examples."""
    model, result = _quantize(
        quantizer,
        subject.model,
        lambda: dataclasses.replace(subject_calibration(subject, quantizer), progress=progress),
        subject.info.name,
        in_place,
        progress,
    )
    if result is None:
        return subject, None
    step = quantizer.step(result)
    if "params_float_share" in result.metrics:  # the report header says how much stayed float
        step["params_left_float"] = f"{result.metrics['params_float_share']:.1%}"
    return subject.with_model(model, step), result


def _quantize(
    quantizer: Quantizer,
    model: nn.Module,
    calibration: Callable[[], Calibration],
    name: str | None = None,
    in_place: bool = False,
    progress: bool = True,
) -> tuple[nn.Module, Result | None]:
    """The one code path of the verb and the stage: checks against the model first (a bad bit plan,
    or one matching no module, fails before any work), then the calibration data if the method needs
    it, then the work. ``name``: the model's name in messages (the subject's file or config name)."""
    quantizer.check(model, name)
    given = calibration() if quantizer.needs_calibration else None
    shown = {"progress": progress} if quantizer.reports_progress else {}
    if in_place and quantizer.in_place_capable:
        return quantizer.quantize(model, given, in_place=True, **shown)
    return quantizer.quantize(model, given, **shown)  # a quantizer of the user's may not take in_place


def as_quantizer(config: Any) -> Quantizer:
    """A quantizer from a quantizer, the name of a ``quant`` option, or a mapping with ``_target_``
    (validated as the CLI validates it: one ``ConfigError`` line naming the bad key)."""
    from modelxray.core.instantiate import build_component, compose_option

    if isinstance(config, Quantizer):
        return config
    if isinstance(config, str):
        node = compose_option("quant", config)
    elif isinstance(config, Mapping):
        from omegaconf import DictConfig, OmegaConf

        node = config if isinstance(config, DictConfig) else OmegaConf.create(dict(config))
    else:
        raise ConfigError(
            "quant",
            "expected a quantizer, the name of a quant config (e.g. 'int4') or a mapping with _target_; "
            f"got {type(config).__name__}",
        )
    quantizer = build_component(node, "quant")
    if not isinstance(quantizer, Quantizer):
        raise ConfigError("quant._target_", f"{type(quantizer).__name__} is not a quantizer")
    return quantizer
