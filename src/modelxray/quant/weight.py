"""Weight-only round-to-nearest quantization of a copy of the model, driven by a bit plan.

Importing this module imports no torch: the RTN kernels (``quant.rtn``) import it when they run.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from modelxray.core.errors import ConfigError
from modelxray.quant.base import Quantizer
from modelxray.quant.plan import check_bits, parse_rules, resolve_plan
from modelxray.quant.rtn import GRANULARITIES, SCALE_BITS, QuantSpec, fake_quantize, packed_bits, relative_error
from modelxray.quant.summary import quant_result
from modelxray.quant.targets import KINDS, Target, find_targets, no_match_message, torchscript_modules

if TYPE_CHECKING:
    from torch import nn

    from modelxray.core.result import Result


@dataclass
class WeightQuantizer(Quantizer):
    """RTN weight quantization: ``bits`` / ``symmetric`` / ``granularity`` / ``group_size`` for every
    module of the ``targets`` kinds not matched by ``skip``, then ``rules`` (see ``quant.plan``).

    A quantizer that would quantize no module of the model is a ``ConfigError`` (key ``quant``),
    raised before any work (``check``), never a report of a format that was not applied."""

    name: ClassVar[str] = "rtn"

    bits: int = 4
    symmetric: bool = True
    granularity: str = "group"
    group_size: int = 128
    scale_dtype: str = "float16"
    targets: list[str] = field(default_factory=lambda: ["linear", "conv"])  # linear | conv | embedding | lm_head
    skip: list[str] = field(default_factory=list)  # globs on module names, e.g. "*patch_embed*"
    rules: list[dict] = field(default_factory=list)

    def validate(self) -> None:
        check_bits(self.bits, "bits")
        self.require_choice("granularity", GRANULARITIES)
        self.require_choice("scale_dtype", SCALE_BITS)
        self.require_positive("group_size")
        for kind in self.targets:
            if kind not in KINDS:
                raise ConfigError("targets", f"unknown kind {kind!r}; valid: {', '.join(KINDS)}")
        self._rules = parse_rules(self.rules)

    def default_spec(self) -> QuantSpec:
        return QuantSpec(self.bits, self.symmetric, self.granularity, self.group_size, self.scale_dtype)

    def plan_for(self, model: nn.Module) -> tuple[list[Target], dict]:
        targets = find_targets(model)
        return targets, resolve_plan(targets, self.default_spec(), self.targets, self.skip, self._rules)

    def selection(self) -> str:
        """What this quantizer applies and to which modules, for messages: ``rtn int8 sym per-channel
        (targets linear, conv)``."""
        how = [f"targets {', '.join(self.targets) or 'none'}"]
        if self.skip:
            how.append(f"skip {', '.join(self.skip)}")
        if self.rules:
            how.append(f"{len(self.rules)} rule{'s' if len(self.rules) > 1 else ''}")
        return f"{self.name} {self.default_spec().describe()} ({'; '.join(how)})"

    def check(self, model: nn.Module, name: str | None = None) -> None:
        """A bad plan, or one that quantizes nothing, fails here: before the copy and any weight change."""
        targets, plan = self.plan_for(model)
        if all(spec is None for spec in plan.values()):
            raise ConfigError("quant", no_match_message(self.selection(), model, targets, name))

    in_place_capable: ClassVar[bool] = True

    def quantize(
        self, model: nn.Module, calibration: Any = None, *, in_place: bool = False
    ) -> tuple[nn.Module, Result]:
        self.check(model)
        start = time.perf_counter()
        if not in_place:
            model = copy.deepcopy(model)
        targets, plan = self.plan_for(model)
        rows, notes = quantize_model(targets, plan)
        scripted = torchscript_modules(model)
        if scripted:
            notes.append(f"{scripted} TorchScript submodule(s) left as loaded: their layers cannot be quantized.")
        return model, quant_result("rtn", rows, model, time.perf_counter() - start, notes, source=self)

    def step(self, result: Result) -> dict[str, Any]:
        return {
            "method": self.name,
            "default": self.default_spec().describe(),
            "effective_bits": round(result.metrics["effective_bits"], 3),
        }


def layer_row(t: Target, spec: QuantSpec, w, q) -> dict:
    """One row of the per-layer table: what a quantized weight was, became and lost. ``w`` is the
    weight as a matrix (``Target.weight_matrix``: a convolution's is flattened), which is what the
    packed format stores, in any dtype (AWQ's is float32): its bytes before are counted at the stored
    weight's element size. ``tower`` only for the modules of a dual encoder's towers."""
    row = {
        "module": t.name,
        "kind": t.kind,
        "component": t.component,
        "block": t.block,
        "bits": spec.bits,
        "format": spec.describe(),
        "elements": w.numel(),
        "bytes_before": w.numel() * t.tensor().element_size(),
        "packed_bytes": packed_bits(tuple(w.shape), spec) / 8,
        "rel_error": relative_error(w, q),
    }
    if t.tower:
        row["tower"] = t.tower
    return row


def quantize_model(targets: list[Target], plan: dict, done: dict | None = None) -> tuple[list[dict], list[str]]:
    """Fake-quantize each planned module in place; a weight shared by two modules is done once
    (``done``: weights already quantized, by storage, when the model is quantized in parts)."""
    rows, notes = [], []
    done = {} if done is None else done
    for t in targets:
        spec = plan.get(t.name)
        if spec is None:
            continue
        ptr = t.storage_key()
        if ptr in done:
            notes.append(f"{t.name} shares its weight with {done[ptr]} (tied): quantized once, as {done[ptr]}.")
            continue
        done[ptr] = t.name
        w = t.weight_matrix()
        q = fake_quantize(w, spec)
        rows.append(layer_row(t, spec, w, q))
        t.set_weight_matrix(q)
    return rows, notes
