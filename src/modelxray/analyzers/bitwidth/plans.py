"""What each bit-width plan is, for the in-memory and the streamed sessions alike: its size figures
(``size_stats``), its row of the configurations table (``config_rows``), and the smallest plan a
budget allows (``smallest_within``, the recommendation's binary search, several levels at a time)."""

from __future__ import annotations

from modelxray.quant.weight import WeightQuantizer


def config_rows(session, configs: dict[str, WeightQuantizer], evaluated: list | None = None) -> tuple[list[dict], dict]:
    """One row per configuration (quality, size), and each one's evaluation by name (``evaluated``:
    their ``evaluate_many`` results, when already taken)."""
    if evaluated is None:
        evaluated = session.evaluate_many([(q, False) for q in configs.values()], "configurations")
    rows, evaluations = [], {}
    for name, (m, stats) in zip(configs, evaluated, strict=True):
        evaluations[name] = m
        rows.append({"config": name, **{k: m.get(k, float("nan")) for k in session.mode.row_keys}, **stats})
    return rows, evaluations


def smallest_within(n: int, within_many, levels: int = 1) -> tuple[int, set[int]]:
    """The smallest ``k`` in 0..n that ``within`` holds for, by binary search (``n`` when even ``n``
    fails), as a plain binary search finds it, and the ``k`` evaluated. ``within_many(ks)`` evaluates
    several at once: each call takes the midpoints of the search's next ``levels`` levels (the first
    call also ``n``), so a search over 64 units takes 7 calls at one level and 4 at two, for the same k."""
    known: dict[int, bool] = {}

    def ahead(lo: int, hi: int, depth: int) -> list[int]:
        if lo >= hi or depth == 0:
            return []
        mid = (lo + hi) // 2
        return [mid, *ahead(lo, mid, depth - 1), *ahead(mid + 1, hi, depth - 1)]

    def ask(ks: list[int]) -> None:
        ks = [k for k in dict.fromkeys(ks) if k not in known]
        known.update(zip(ks, within_many(ks), strict=True))

    ask([n, *(ahead(0, n, levels - 1) if levels > 1 else [])])
    lo, hi = (n, n) if not known[n] else (0, n)
    while lo < hi:
        mid = (lo + hi) // 2
        if mid not in known:
            ask(ahead(lo, hi, levels))
        if known[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo, set(known)


def size_stats(rows: list[dict], model) -> dict:
    """A plan's size figures from its quantized rows (``quant_result``)."""
    from modelxray.quant.summary import quant_result

    m = quant_result("rtn", rows, model, 0.0, []).metrics
    return {
        "effective_bits": m["effective_bits"],
        "model_effective_bits": m["model_effective_bits"],
        "model_mb": m["model_bytes_after"] / 2**20,
        "compression_ratio": m["compression_ratio"],
        "params_quantized": m["params_quantized"],
    }
