"""``insights.md``: each stage's observations, asked of the object that produced its result."""

from __future__ import annotations


def collect_insights(results: dict) -> dict[str, list[str]]:
    """Sections of sentences: a failed stage's last error line, else its presenter's insights
    (which may read the other results, e.g. performance's deployment scenarios read the quant
    report) followed by the sentences the stage wrote itself."""
    from modelxray.metrics.degenerate import sentence

    sections: dict[str, list[str]] = {}
    signs = [s for r in results.values() if r.ok for s in r.data.get("degenerate", [])]
    if signs:  # first, before any claim about robustness or quantization
        sections["model check"] = [sentence(list(dict.fromkeys(signs)), "The model")]
    for name, result in results.items():
        if not result.ok:
            sections[name] = [f"The {name} analyzer failed: {result.error.strip().splitlines()[-1]}"]
            continue
        lines = result.sentences(results)
        if lines:
            sections[name] = lines
    return sections
