"""The bitwidth analyzer's ``custom`` plans: ``{name: plan}``, each plan either

- rules, as in ``conf/quant/custom.yaml`` (``[{blocks: [0], component: attention, bits: 8}, ...]``), or
- a per-layer list, one mapping per block of the model in order (``[{attn_bits: 8, mlp_bits: 4},
  {attn_bits: 4, mlp_bits: 8}]``), turned into the equivalent rules once the blocks are known;

and any plan, or the whole ``custom``, may be the path of a YAML file holding it (or that YAML as
text: a string opening with ``{`` or ``[``). The plans are
read and checked when the config is built (files, keys, bit ranges: no model needed); the per-layer
lists are checked against the model's blocks (their number, the components each block has) in
preflight, before any work, and evaluated as the rules they expand to, so both forms give the same
quantized model.

Blocks are those of ``blocks.find_blocks``: a language model's decoder layers, a ViT's encoder
layers, a ResNet's stages, each tower of a dual encoder in turn, in the model's module order;
layer ``i`` of the list is the ``i``-th block found. Modules outside every block
(embeddings, the head) and components a mapping leaves out get ``low_bits``, as with rules.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from modelxray.core.errors import ConfigError

# per-layer key -> the component (``quant.targets``) of the block's modules it sets
LAYER_KEYS = {
    "attn_bits": "attention",
    "mlp_bits": "mlp",
    "embedding_bits": "embedding",
    "projection_bits": "projection",
    "other_bits": "other",
}
EXAMPLE = "{attn_bits: 8, mlp_bits: 4}"
PLAN_TEXT = f"a list of rules or of per-layer mappings like {EXAMPLE}, or the path of a YAML file holding one"
WHOLE_TEXT = "a mapping {name: plan} (each plan a list of rules or of per-layer mappings), or a YAML file of one"


def _read_yaml(path_text: str, key: str, expected: str = PLAN_TEXT) -> Any:
    """The YAML document at ``path_text`` (relative to the working directory), or one line naming
    ``key`` and the path. Text opening with ``{`` or ``[`` is read as YAML itself (no path does), so
    ``f'analyzer.bitwidth.custom="{configs}"'`` passes a Python dict through an override."""
    import yaml

    if path_text.lstrip().startswith(("{", "[")):
        try:
            return yaml.safe_load(path_text)
        except yaml.YAMLError as exc:
            raise ConfigError(key, f"is not valid YAML: {str(exc).splitlines()[0]}") from None
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise ConfigError(key, f"no such file: {path_text} (expected {expected})")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(key, f"{path_text} is not valid YAML: {str(exc).splitlines()[0]}") from None


def load_custom(custom: dict | str | None) -> dict[str, list]:
    """``custom`` with every file read: ``{name: list}``. A string (the whole ``custom``, or one
    plan) is a YAML file: of ``{name: plan}`` for the whole, of the plan's list for one name."""
    if custom is None:
        return {}
    if isinstance(custom, str):
        custom = _read_yaml(custom, "custom", WHOLE_TEXT)
        if not isinstance(custom, dict):
            raise ConfigError("custom", f"expected {WHOLE_TEXT}; got {custom!r}")
    out = {}
    for name, plan in custom.items():
        key = f"custom.{name}"
        if isinstance(plan, str):
            plan = _read_yaml(plan, key)
        if not isinstance(plan, list):
            raise ConfigError(key, f"expected {PLAN_TEXT}; got {plan!r}")
        out[str(name)] = plan
    return out


def is_layer_plan(plan: list) -> bool:
    """A per-layer list: some item is a mapping with a ``..._bits`` key (a rule has none)."""
    return any(isinstance(item, dict) and any(str(k).endswith("_bits") for k in item) for item in plan)


def check_layer_plan(plan: list, key: str) -> None:
    """Config-time checks of a per-layer list: each item a mapping of known keys to bit widths."""
    from modelxray.quant.plan import check_bits

    for i, item in enumerate(plan):
        if not isinstance(item, dict):
            raise ConfigError(f"{key}[{i}]", f"must be a mapping like {EXAMPLE} (one per block), got {item!r}")
        for k, bits in item.items():
            if k not in LAYER_KEYS:
                raise ConfigError(
                    f"{key}[{i}].{k}", f"unknown per-layer key; valid: {', '.join(LAYER_KEYS)} (e.g. {EXAMPLE})"
                )
            check_bits(bits, f"{key}[{i}].{k}")


def layer_rules(plan: list, blocks: list, key: str) -> list[dict]:
    """The rules of a per-layer list on a model with ``blocks`` (``find_blocks``, ``other`` units
    left out): for each layer and key, the block's modules of that component at those bits. A list
    of another length, or a key for a component the block lacks, is one line naming the key."""
    from modelxray.analyzers.bitwidth.blocks import component_rules

    labels = ", ".join(b.label for b in blocks[:4]) + (", ..." if len(blocks) > 4 else "")
    if len(plan) != len(blocks):
        where = f"{key}[{len(blocks)}]" if len(plan) > len(blocks) else key
        raise ConfigError(
            where,
            f"gives {len(plan)} layer{'s' * (len(plan) != 1)}, the model has {len(blocks)} blocks ({labels}): "
            f"give one mapping like {EXAMPLE} per block",
        )
    rules = []
    for i, (item, block) in enumerate(zip(plan, blocks)):
        have = list(dict.fromkeys(t.component for t in block.modules))
        for k, bits in item.items():
            component = LAYER_KEYS[k]
            if component not in have:
                valid = [lk for lk, c in LAYER_KEYS.items() if c in have]
                raise ConfigError(
                    f"{key}[{i}].{k}",
                    f"block {block.label} ({block.type}) has no {component} modules to quantize; "
                    f"its keys: {', '.join(valid) or 'none'}",
                )
            rules.extend(component_rules(block, component, bits))
    return rules


def model_blocks(model, kinds: list[str]) -> list:
    """The blocks a per-layer list indexes: ``find_blocks`` over the targets of ``kinds``, without
    the ``other`` units of modules outside every block."""
    from modelxray.analyzers.bitwidth.blocks import OTHER, find_blocks
    from modelxray.quant.targets import find_targets

    targets = [t for t in find_targets(model) if t.kind in kinds]
    return [b for b in find_blocks(model, targets) if b.type != OTHER]


def resolve_rules(custom: dict[str, list], model, kinds: list[str]) -> dict[str, list[dict]]:
    """Every plan as rules on ``model``: rules as given, per-layer lists expanded (``layer_rules``)."""
    blocks = None
    out = {}
    for name, plan in custom.items():
        if is_layer_plan(plan):
            blocks = model_blocks(model, kinds) if blocks is None else blocks
            out[name] = layer_rules(plan, blocks, f"custom.{name}")
        else:
            out[name] = plan
    return out
