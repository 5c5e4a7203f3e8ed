"""A weights-only file (a state dict without an architecture): its tensors can be inspected, not run."""

from __future__ import annotations

from typing import ClassVar

from modelxray.kinds.base import Kind


class WeightsOnly(Kind):
    name: ClassVar[str] = "weights"
    task: ClassVar[str] = "weights"
    noun: ClassVar[str] = "weights-only file"
    models: ClassVar[str] = "`file` without an architecture"
    datasets: ClassVar[str] = "none"
    quality: ClassVar[str] = "none: tensor statistics only (`analyzer=inspect`)"
    fitting: ClassVar[str] = "no dataset"
    agreement_after_quant: ClassVar[bool] = False
    compared_by_reference: ClassVar[bool] = False
    reads_dataset: ClassVar[bool] = False
    runs: ClassVar[bool] = False
    analyzer_hint: ClassVar[str] = ", or set model.architecture so the model can run"
