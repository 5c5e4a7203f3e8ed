"""The frame of calibration-based quantizers (``BlockwiseQuantizer``): quantize a copy of the model
block by block on calibration batches, then RTN for the planned modules outside the blocks."""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING

from modelxray.core.errors import ConfigError
from modelxray.core.progress import bar
from modelxray.quant.calibration import BlockInputs, Calibration, decoder_blocks
from modelxray.quant.summary import quant_result
from modelxray.quant.weight import quantize_model

if TYPE_CHECKING:
    from torch import nn

    from modelxray.core.result import Result
    from modelxray.quant.blockwise import BlockwiseQuantizer


def quantize_blockwise(
    quantizer: BlockwiseQuantizer, model: nn.Module, calibration: Calibration | None
) -> tuple[nn.Module, Result]:
    """A quantized copy of ``model`` and the report; ``model`` itself is never modified."""
    if calibration is None:
        raise ConfigError("calibration", f"{quantizer.name} needs calibration data; none was given")
    start = time.perf_counter()
    model = copy.deepcopy(model)
    targets, plan = quantizer.plan_for(model)
    _, blocks = decoder_blocks(model)
    inputs = BlockInputs(model, blocks, calibration.batches(quantizer.batch_size))
    by_module = {t.module: t for t in targets if plan.get(t.name) is not None}
    quantizer.begin()
    rows, done = [], set()
    for block in bar(blocks, desc=f"{quantizer.name}: blocks"):
        layer_targets = [by_module[m] for m in block.modules() if m in by_module]
        if layer_targets:
            rows += quantizer.quantize_block(block, layer_targets, plan, inputs)
            done.update(t.name for t in layer_targets)
        inputs.run(block, update=True)
    rest = {t.name: plan[t.name] for t in targets if t.name not in done}
    rtn_rows, notes = quantize_model([t for t in targets if t.name in rest], rest)
    for r in rtn_rows:
        r["format"] += " (RTN: outside the blocks)"
    how, extra = quantizer.summary()
    notes.insert(
        0,
        f"{quantizer.name.upper()} calibrated on {inputs.n_tokens:,} tokens ({calibration.n_windows} "
        f"{calibration.origin}); {how}",
    )
    result = quant_result(quantizer.name, rows + rtn_rows, model, time.perf_counter() - start, notes, source=quantizer)
    result.metrics.update(extra)
    return model, result
