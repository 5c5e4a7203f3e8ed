"""The blocks of a classifier, found by structure rather than by model-specific names, so the
bitwidth analyzer can quantize one block at a time on any ViT, CNN or dual encoder.

A *block list* is an ``nn.ModuleList`` (or an ``nn.Sequential`` of at least two children) whose
children are all of one class and each hold a quantized weight: a ViT's encoder layers, a ResNet's
stages, a timm model's ``blocks``, each tower of a CLIP model. The outermost block lists win (a
ResNet's stages, not the layers inside a stage). A model without one (a plain MLP or CNN in an
``nn.Sequential``) falls back to its top-level children that hold quantized weights, looking
through single-child wrappers. Quantized modules outside every block (patch embeddings, heads,
joint-space projections) form one more unit per tower, labelled ``other``.

Labels name the tower when there is one: ``vision.layers.3``, ``text.layers.1``; else the list's
attribute and index (``layers.0``, ``stages.2``) or, for the fallback, the child's dotted name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from modelxray.models.block_inputs import inside
from modelxray.quant.targets import Target, tower_of

OTHER = "other"  # the label of the quantized modules outside every block (per tower: vision.other)


@dataclass
class Block:
    label: str
    prefix: str  # the module's dotted name in the model ("" for the model itself)
    tower: str | None
    index: int  # position within its block list (the fallback: within the top-level children)
    type: str  # the module's class, e.g. ViTLayer, Linear
    modules: list[Target] = field(default_factory=list)  # the quantized targets inside

    @property
    def params(self) -> int:
        return sum(t.weight_matrix().numel() for t in self.modules)


def _holds(prefix: str, targets: list[Target]) -> bool:
    return any(inside(t.name, prefix) for t in targets)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _is_block_list(module: nn.Module, prefix: str, targets: list[Target]) -> bool:
    children = list(module.named_children())
    least = 1 if isinstance(module, nn.ModuleList) else 2
    if not isinstance(module, (nn.ModuleList, nn.Sequential)) or len(children) < least:
        return False
    if len({type(c) for _, c in children}) != 1:
        return False
    return all(_holds(_join(prefix, n), targets) for n, _ in children)


def _block_lists(model: nn.Module, targets: list[Target]) -> list[str]:
    """Prefixes of the outermost block lists, in module order."""
    found: list[str] = []
    for name, module in model.named_modules():
        if any(inside(name, p) for p in found):
            continue
        if _is_block_list(module, name, targets):
            found.append(name)
    return found


def _fallback_root(model: nn.Module, targets: list[Target]) -> tuple[str, nn.Module]:
    """The model, looking through wrappers with a single child that holds quantized weights."""
    prefix, module = "", model
    while True:
        holding = [(n, c) for n, c in module.named_children() if _holds(_join(prefix, n), targets)]
        if len(holding) != 1 or list(holding[0][1].children()) == []:
            return prefix, module
        prefix, module = _join(prefix, holding[0][0]), holding[0][1]


def find_blocks(model: nn.Module, targets: list[Target]) -> list[Block]:
    """Every block of ``model`` with the ``targets`` inside it, then the ``other`` unit of each tower."""
    blocks: list[Block] = []
    for prefix in _block_lists(model, targets):
        tower = tower_of(prefix + ".0")
        leaf = prefix.rsplit(".", 1)[-1]
        for i, (name, child) in enumerate(model.get_submodule(prefix).named_children()):
            label = ".".join(p for p in (tower, leaf, str(i)) if p)
            blocks.append(Block(label, _join(prefix, name), tower, i, type(child).__name__))
    if not blocks:
        root, module = _fallback_root(model, targets)
        holding = [(n, c) for n, c in module.named_children() if _holds(_join(root, n), targets)]
        for i, (name, child) in enumerate(holding):
            prefix = _join(root, name)
            blocks.append(Block(prefix, prefix, tower_of(prefix), i, type(child).__name__))
    if len({b.label for b in blocks}) < len(blocks):  # two lists with one attribute name: full names
        for b in blocks:
            b.label = b.prefix
    _assign(blocks, targets)
    return [b for b in blocks if b.modules]


def _assign(blocks: list[Block], targets: list[Target]) -> None:
    """Each target into the block holding it, the rest into its tower's ``other`` unit."""
    others: dict[str | None, Block] = {}
    for t in targets:
        block = next((b for b in blocks if inside(t.name, b.prefix)), None)
        if block is None:
            if t.tower not in others:
                label = f"{t.tower}.{OTHER}" if t.tower else OTHER
                others[t.tower] = Block(label, "", t.tower, -1, OTHER)
            block = others[t.tower]
        block.modules.append(t)
    blocks.extend(others.values())


def module_rules(block: Block, bits: int) -> list[dict]:
    """Plan rules giving every quantized module of ``block`` ``bits``: a name glob per kind, so the
    rules read like the block and never reach a kind the analyzer does not quantize."""
    if block.type == OTHER:
        return [{"name": t.name, "bits": bits} for t in block.modules]
    glob = block.prefix if any(t.name == block.prefix for t in block.modules) else f"{block.prefix}.*"
    kinds = list(dict.fromkeys(t.kind for t in block.modules))
    return [{"name": glob, "kind": kind, "bits": bits} for kind in kinds]


def component_rules(block: Block, component: str, bits: int) -> list[dict]:
    """Plan rules giving the quantized modules of ``block`` whose component is ``component``
    (attention, mlp, ...) ``bits``: the block's name glob and the component, a rule per kind, so
    they reach exactly those modules (a per-layer plan's ``attn_bits`` of one block)."""
    modules = [t for t in block.modules if t.component == component]
    glob = block.prefix if any(t.name == block.prefix for t in modules) else f"{block.prefix}.*"
    kinds = list(dict.fromkeys(t.kind for t in modules))
    return [{"name": glob, "component": component, "kind": kind, "bits": bits} for kind in kinds]
