"""Bit plans: which format each module gets, from a default and an ordered list of rules.

A rule matches modules by any of ``name`` (a glob on the dotted module name), ``component``,
``kind`` (linear / conv / embedding / lm_head) and ``blocks`` (block indices; negative counts from
the last block; ``"a-b"`` is an inclusive range), and sets any of ``bits``, ``symmetric``,
``granularity``, ``group_size``, or ``skip: true``. Later rules win. Mixed precision, progressive
and fully custom plans are all rule lists in YAML::

    rules:
      - {component: attention, bits: 8}          # mixed_attn8_mlp4
      - {blocks: [0, 1, -2, -1], bits: 8}        # progressive: first and last two blocks
      - {name: "model.layers.3.mlp.*", skip: true}

``component`` is one of the role of a module inside its block (attention / mlp / embedding /
lm_head / projection / other) or the tower of a dual encoder it belongs to (vision / text; see
``quant.targets``). A module has one role and at most one tower, and a rule's ``component`` matches
either, so ``{component: vision, bits: 8}`` covers every module of a CLIP vision tower (its
attention, MLP, patch embedding and ``visual_projection``) while ``{component: mlp}`` still covers
the MLPs of both towers (``{name: "vision_model.*", component: mlp}`` for the vision MLPs only).
Language models and plain classifiers have no tower. In a rule whose ``component`` is a tower,
negative ``blocks`` count from that tower's last block (the towers of a dual encoder may differ in
depth); elsewhere from the model's last block.

Rules are checked twice, both before any weight changes: their keys and values when the config is
instantiated, and that each one matches at least one module once the model is known.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field, replace
from typing import Any

from modelxray.core.errors import ConfigError
from modelxray.quant.rtn import GRANULARITIES, QuantSpec
from modelxray.quant.targets import COMPONENTS, KINDS, TOWERS, Target, num_blocks

MIN_BITS, MAX_BITS = 2, 16
_MATCH_KEYS = {"name", "component", "kind", "blocks"}
_SET_KEYS = {"bits", "symmetric", "granularity", "group_size", "skip"}


def check_bits(bits: Any, key: str) -> None:
    if not isinstance(bits, int) or isinstance(bits, bool) or not MIN_BITS <= bits <= MAX_BITS:
        raise ConfigError(key, f"bits must be an integer from {MIN_BITS} to {MAX_BITS}, got {bits!r}")


@dataclass
class Rule:
    index: int
    match: dict[str, Any]
    sets: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"rules[{self.index}]"


def parse_rules(raw: list[dict]) -> list[Rule]:
    """Check rule keys and values (config time: no model needed)."""
    rules = []
    for i, r in enumerate(raw):
        key = f"rules[{i}]"
        if not isinstance(r, dict):
            raise ConfigError(key, f"must be a mapping like {{component: attention, bits: 8}}, got {r!r}")
        unknown = sorted(set(r) - _MATCH_KEYS - _SET_KEYS)
        if unknown:
            raise ConfigError(
                f"{key}.{unknown[0]}", f"unknown rule key; valid: {', '.join(sorted(_MATCH_KEYS | _SET_KEYS))}"
            )
        match = {k: r[k] for k in _MATCH_KEYS if k in r}
        sets = {k: r[k] for k in _SET_KEYS if k in r}
        if not match:
            raise ConfigError(key, "matches everything: give at least one of name, component, kind, blocks")
        if not sets:
            raise ConfigError(key, "changes nothing: give bits, symmetric, granularity, group_size or skip")
        if "bits" in sets:
            check_bits(sets["bits"], f"{key}.bits")
        if "component" in match and match["component"] not in COMPONENTS:
            raise ConfigError(f"{key}.component", f"must be one of {', '.join(COMPONENTS)}; got {match['component']!r}")
        if "kind" in match and match["kind"] not in KINDS:
            raise ConfigError(f"{key}.kind", f"must be one of {', '.join(KINDS)}; got {match['kind']!r}")
        if "granularity" in sets and sets["granularity"] not in GRANULARITIES:
            raise ConfigError(f"{key}.granularity", f"must be one of {', '.join(GRANULARITIES)}")
        if "group_size" in sets and (not isinstance(sets["group_size"], int) or sets["group_size"] <= 0):
            raise ConfigError(f"{key}.group_size", f"must be a positive integer, got {sets['group_size']!r}")
        if "blocks" in match:
            _parse_blocks(match["blocks"], None, f"{key}.blocks")
        rules.append(Rule(i, match, sets))
    return rules


def _parse_blocks(value: Any, n_blocks: int | None, key: str) -> set[int]:
    items = value if isinstance(value, list) else [value]
    out: set[int] = set()
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool):
            idx = item
            if n_blocks is not None:
                idx = item + n_blocks if item < 0 else item
                if not 0 <= idx < n_blocks:
                    raise ConfigError(key, f"block {item} is out of range: the model has blocks 0..{n_blocks - 1}")
            out.add(idx)
        elif isinstance(item, str) and "-" in item.strip("-"):
            lo, hi = item.split("-", 1)
            if not (lo.isdigit() and hi.isdigit()) or int(lo) > int(hi):
                raise ConfigError(key, f"range {item!r} must read 'first-last' with first <= last, e.g. '2-27'")
            rng = range(int(lo), int(hi) + 1)
            if n_blocks is not None and int(hi) >= n_blocks:
                raise ConfigError(key, f"range {item!r} is out of range: the model has blocks 0..{n_blocks - 1}")
            out.update(rng)
        else:
            raise ConfigError(key, f"blocks are integers or 'first-last' ranges, got {item!r}")
    return out


def _matches(rule: Rule, t: Target, blocks: set[int] | None) -> bool:
    m = rule.match
    if "name" in m and not fnmatch.fnmatchcase(t.name, m["name"]):
        return False
    if "component" in m and m["component"] not in t.groups:
        return False
    if "kind" in m and t.kind != m["kind"]:
        return False
    if blocks is not None and t.block not in blocks:
        return False
    return True


def resolve_plan(
    targets: list[Target], default: QuantSpec, kinds: list[str], skip: list[str], rules: list[Rule]
) -> dict[str, QuantSpec | None]:
    """The format of every candidate module (None = left as is). Fails if a rule matches nothing."""
    n_blocks = num_blocks(targets)
    tower_blocks = {tower: num_blocks([t for t in targets if t.tower == tower]) for tower in TOWERS}
    plan: dict[str, QuantSpec | None] = {}
    for t in targets:
        chosen = t.kind in kinds and not any(fnmatch.fnmatchcase(t.name, p) for p in skip)
        plan[t.name] = default if chosen else None
    for rule in rules:
        blocks = None
        if "blocks" in rule.match:
            n = tower_blocks.get(rule.match.get("component")) or n_blocks
            blocks = _parse_blocks(rule.match["blocks"], n, f"quant.{rule.key}.blocks")
        hit = [t for t in targets if _matches(rule, t, blocks)]
        if not hit:
            example = next((t.name for t in targets if t.is_matrix), "?")
            raise ConfigError(
                f"quant.{rule.key}",
                f"matches no module of this model (e.g. {example!r}); check name, component, kind and blocks",
            )
        for t in hit:
            if rule.sets.get("skip"):
                plan[t.name] = None
                continue
            base = plan[t.name] or default
            plan[t.name] = replace(base, **{k: v for k, v in rule.sets.items() if k != "skip"})
    return plan
