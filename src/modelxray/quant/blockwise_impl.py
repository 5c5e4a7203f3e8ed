"""The frame of calibration-based quantizers (``BlockwiseQuantizer``): quantize a copy of the model
block by block through each stack of blocks on calibration batches, then the Linear layers outside
the stacks from a forward of the whole model, then RTN for the other planned modules. The report
lists every quantizable module left as it was, and why."""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING

from modelxray.core.errors import ConfigError
from modelxray.core.progress import bar
from modelxray.quant.calibration import BlockInputs, Calibration, ModelInputs, block_stacks, is_chain
from modelxray.quant.summary import quant_result
from modelxray.quant.weight import quantize_model

if TYPE_CHECKING:
    from torch import nn

    from modelxray.core.result import Result
    from modelxray.quant.blockwise import BlockwiseQuantizer
    from modelxray.quant.targets import Target

NO_INPUT = "received no calibration input (not run by the model's forward on the calibration batches)"


def quantize_blockwise(
    quantizer: BlockwiseQuantizer, model: nn.Module, calibration: Calibration | None, in_place: bool = False
) -> tuple[nn.Module, Result]:
    """A quantized copy of ``model`` (``in_place``: ``model`` itself, quantized) and the report."""
    if calibration is None:
        raise ConfigError("calibration", f"{quantizer.name} needs calibration data; none was given")
    start = time.perf_counter()
    if not in_place:
        model = copy.deepcopy(model)
    targets, plan = quantizer.plan_for(model)
    planned = [t for t in targets if plan.get(t.name) is not None]  # each expert of a fused tensor is one
    quantizer.begin()
    rows, seen, chained, parallel = [], [], [], []
    for stack_name, blocks in block_stacks(model):
        if not is_chain(model, blocks, calibration, quantizer.batch_size):
            parallel.append(stack_name)  # its blocks are calibrated in the whole model's forward
            continue
        inputs = BlockInputs(model, blocks, calibration, quantizer.batch_size)
        if inputs.n_batches:
            seen.append((stack_name, inputs.n_tokens, inputs.repeated))
        stack_rows, done_blocks = _quantize_stack(
            quantizer, stack_name, blocks, planned, plan, inputs, calibration.progress
        )
        rows += stack_rows
        chained += done_blocks
        if len(done_blocks) < len(blocks):
            parallel.append(stack_name)
    in_stacks = {m for block in chained for m in block.modules()}
    outside = [t for t in planned if t.module not in in_stacks and t.is_linear]
    if outside:
        rows += quantizer.quantize_block(model, outside, plan, ModelInputs(model, calibration, quantizer.batch_size))
    done = {r["module"] for r in rows}
    # an expert no calibration token was routed to has no inputs to calibrate on: rounded to nearest
    idle = {t.name for t in planned if t.expert is not None and t.name not in done}
    rest = {t.name: plan[t.name] for t in planned if (not t.is_linear or t.name in idle) and t.name not in done}
    rtn_rows, notes = quantize_model([t for t in targets if t.name in rest], rest)
    for r in rtn_rows:
        r["format"] += (
            " (RTN: no calibration token routed to it)" if r["module"] in idle else " (RTN: outside the blocks)"
        )
    rows += rtn_rows
    routed = sum(1 for t in planned if t.expert is not None and t.name in done)
    if routed or idle:
        notes.append(
            f"Experts of fused mixture-of-experts tensors: {routed} calibrated on the tokens their router sent them"
            + (f", {len(idle)} rounded to nearest (no calibration token was routed to them)." if idle else ".")
        )
    if not rows:
        raise ConfigError(
            "quant",
            f"{quantizer.name}: none of the planned layers received calibration input (the model's forward on "
            "the calibration batches ran none of them); use an RTN config such as quant=int4",
        )
    skipped = not_quantized(quantizer, targets, plan, {r["module"] for r in rows})
    how, extra = quantizer.summary()
    notes[:0] = _notes(quantizer.name, how, calibration, seen, [t.name for t in outside if t.name in done], skipped)
    if parallel:
        notes.insert(
            1,
            f"Not chains of blocks (each block reads its own input, as parallel heads do): {', '.join(parallel)}; "
            "calibrated in the forward of the whole model.",
        )
    result = quant_result(quantizer.name, rows, model, time.perf_counter() - start, notes, source=quantizer)
    result.tables["not_quantized"] = skipped
    result.metrics["modules_not_quantized"] = float(len(skipped))
    result.metrics.update(extra)
    return model, result


def _quantize_stack(
    quantizer, stack_name: str, blocks, planned: list, plan: dict, inputs: BlockInputs, progress: bool = True
) -> tuple[list[dict], list]:
    """Each block's planned layers from the inputs that block sees; its outputs then feed the next.
    Returns the rows and the blocks done so. A block that cannot read the one before's output
    (a list ``is_chain`` could not judge) and the blocks after it are left to the caller's forward
    of the whole model, which sees their real inputs (the failed forward changed no weight)."""
    rows: list[dict] = []
    done: list = []
    if not inputs.n_batches:
        return rows, done
    for i, block in enumerate(bar(blocks, desc=f"{quantizer.name}: {stack_name}", enabled=progress)):
        inside = set(block.modules())
        layer_targets = [t for t in planned if t.module in inside]
        try:
            if layer_targets:
                rows += quantizer.quantize_block(block, layer_targets, plan, inputs)
            inputs.run(block, update=True)
        except RuntimeError as exc:
            if i > 0:
                break
            first = (str(exc).splitlines() or [""])[0][:120]
            raise ConfigError(
                "quant", f"{quantizer.name}: the first block of {stack_name} failed on its inputs: {first}"
            ) from None
        done.append(block)
    return rows, done


def not_quantized(quantizer, targets: list[Target], plan: dict, done: set[str]) -> list[dict]:
    """Every quantizable module left as loaded, with the reason: its kind is not among the targets (a
    convolution: GPTQ and AWQ calibrate Linear layers only), ``skip`` or a rule left it out, or it
    received no calibration input. A module whose weight is tied to a quantized one is not listed."""
    tied = {t.storage_key() for t in targets if t.name in done}  # a tied LM head is quantized too
    out = []
    for t in targets:
        if t.name in done or t.storage_key() in tied:
            continue
        if plan.get(t.name) is not None:
            why = NO_INPUT
        elif t.is_conv:
            why = f"convolution: {quantizer.name.upper()} calibrates Linear layers only; RTN (quant=int4) rounds convolutions"
        elif t.kind not in quantizer.targets:
            why = f"{t.kind} not in quant.targets"
        else:
            why = "left out by quant.skip or a rule"
        row = {"module": t.name, "kind": t.kind, "reason": why}
        if t.tower:
            row["tower"] = t.tower
        out.append(row)
    return out


def _notes(
    method: str, how: str, calibration: Calibration, seen: list, outside: list[str], skipped: list[dict]
) -> list[str]:
    """What the report says first: what was calibrated on what, and what stayed as loaded."""
    name = method.upper()
    if len(seen) == 1:
        line = f"{name} calibrated on {seen[0][1]:,} tokens ({calibration.n_rows} {calibration.origin}); {how}"
    else:
        stacks = ", ".join(
            f"{stack} on {tokens:,} tokens" + (" (the same in every forward, kept once)" if repeated else "")
            for stack, tokens, repeated in seen
        )
        line = f"{name} calibrated on {calibration.n_rows} {calibration.origin}: {stacks}; {how}"
    notes = [line]
    if outside:
        notes.append(f"Calibrated on their inputs in a forward of the whole quantized model: {', '.join(outside)}.")
    if skipped:
        listed = "; ".join(f"{r['module']} ({r['reason']})" for r in skipped)
        notes.append(f"Not quantized, left as loaded: {listed}.")
    return notes
