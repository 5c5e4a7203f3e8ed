"""The inspection in a few lines, for the top of its reports: what the model is, what a forward
costs, and the three findings that matter most (the advice ranked first in each kind, latency-bound
ops last of the kinds, then the rest). A pure function of the Result, so a saved result reads the
same."""

from __future__ import annotations

from modelxray.core.formatting import human_bytes
from modelxray.models.input_tensors import describe_input

FINDINGS = 3


def executive_summary(result) -> list[str]:
    """``What``, ``Cost`` and up to three ``Finding`` lines (plain text, no Markdown)."""
    m, data = result.metrics, result.data
    arch = data.get("architecture", {})
    what = f"What: a {arch.get('kind', 'model')}"
    if "parameters" in m:
        what += f" of {int(m['parameters']):,} parameters ({human_bytes(int(m.get('weight_bytes', 0)))})"
    out = [what + (f"; {arch['reason']}." if arch.get("reason") else ".")]
    cost = []
    if "flops_total" in m:
        cost.append(f"{m['flops_total'] / 1e9:.3g} GFLOPs per forward")
    if "forward_ms" in m:
        cost.append(f"{m['forward_ms']:.3g} ms on this machine")
    if "energy_j_per_forward" in m:
        how = "measured" if m.get("energy_measured") else "estimated"
        cost.append(f"{m['energy_j_per_forward']:.3g} J ({how})")
    if cost:
        shape = describe_input(arch["input"]) if arch.get("input") else "its input"
        out.append(f"Cost: {', '.join(cost)}, on {shape}.")
    elif data.get("compute_error"):
        out.append(f"Cost: not measured ({data['compute_error']['error']}).")
    recs = result.tables.get("recommendations") or []
    firsts, rest = [], []
    for r in recs:  # the first of each kind of advice, then the others in order
        (rest if any(f["action"] == r["action"] for f in firsts) else firsts).append(r)
    firsts.sort(key=lambda r: r["action"] == "latency-bound")  # a call's fixed cost: the least to gain, last
    for i, r in enumerate((firsts + rest)[:FINDINGS], 1):
        out.append(f"Finding {i}: {r['action']} {r['target']}: {r['why']}.")
    if not recs:
        out.append("Findings: nothing to act on (no layer stands out for pruning, precision or fusion).")
    return out
