"""A static energy model of a forward: the idle power is subtracted from the measured energy, and
what remains (the dynamic energy, what running the model added) is shared among the operations by
the work each did, a roofline-style model::

    energy_i = e_flop x FLOPs_i + e_byte x bytes_i

The coefficients are fitted on per-operation energy counters where there are some (RAPL read around
each op, ``fit_coefficients``), else documented constants set their ratio: Horowitz, "Computing's
energy problem (and what we can do about it)", ISSCC 2014, 45 nm: a 32-bit float multiply 3.7 pJ and
add 0.9 pJ, so 2.3 pJ per FLOP of a multiply-add; a 64-bit DRAM access 1.3-2.6 nJ, so 162.5 pJ per
byte at its low end (the bytes here are those the roofline counts: each input read and each output
written once, its memory roof being DRAM's bandwidth). The shares are then scaled so that they add up
to the measured dynamic energy: the model splits what was measured, it does not replace it; the
scale says how far the constants are from this machine. Pure functions: numbers in, numbers out."""

from __future__ import annotations

PJ_PER_FLOP = 2.3  # Horowitz 2014: (3.7 pJ multiply + 0.9 pJ add) / 2 FLOPs, FP32, 45 nm
PJ_PER_BYTE = 162.5  # Horowitz 2014: 1.3 nJ per 64-bit DRAM access / 8 bytes


def dynamic_energy(total_j: float, idle_w: float, seconds: float) -> float:
    """What the work added to the idle draw: ``total - idle x seconds``, never below 0."""
    return max(0.0, total_j - idle_w * seconds)


def modelled(flops: float, nbytes: float, e_flop: float, e_byte: float) -> float:
    """``e_flop x flops + e_byte x bytes`` (joules, with the coefficients in joules)."""
    return e_flop * flops + e_byte * nbytes


def attribute(rows: list[dict], dynamic_j: float, e_flop: float, e_byte: float) -> list[float]:
    """Each row's (``flops``, ``bytes``) share of ``dynamic_j`` by the model: the parts add up to
    ``dynamic_j`` whenever any row did work (all zero otherwise)."""
    weights = [modelled(r.get("flops", 0.0), r.get("bytes", 0.0), e_flop, e_byte) for r in rows]
    total = sum(weights)
    return [dynamic_j * w / total if total > 0 else 0.0 for w in weights]


def scale(rows: list[dict], dynamic_j: float, e_flop: float, e_byte: float) -> float | None:
    """Measured dynamic energy over the model's own total: 1 when the coefficients predict this
    machine exactly, 10 when it spent ten times what they say. None when the model predicts nothing."""
    total = sum(modelled(r.get("flops", 0.0), r.get("bytes", 0.0), e_flop, e_byte) for r in rows)
    return dynamic_j / total if total > 0 else None


def fit_coefficients(flops: list[float], nbytes: list[float], energy: list[float]) -> tuple[float, float] | None:
    """Least-squares ``(e_flop, e_byte)``, both at least 0, fitting ``energy_i ~ e_flop x flops_i +
    e_byte x bytes_i`` over the operations: the 2 x 2 normal equations, and where one coefficient
    comes out negative, the other fitted alone. None with fewer than two operations or nothing to fit."""
    if len(flops) < 2 or not any(e > 0 for e in energy):
        return None
    ff = sum(f * f for f in flops)
    bb = sum(b * b for b in nbytes)
    fb = sum(f * b for f, b in zip(flops, nbytes))
    fe = sum(f * e for f, e in zip(flops, energy))
    be = sum(b * e for b, e in zip(nbytes, energy))
    det = ff * bb - fb * fb
    if det > 0:
        a, b = (fe * bb - be * fb) / det, (be * ff - fe * fb) / det
        if a >= 0 and b >= 0:
            return a, b
    alone = [(fe / ff if ff > 0 else 0.0, 0.0), (0.0, be / bb if bb > 0 else 0.0)]
    alone = [(a, b) for a, b in alone if a >= 0 and b >= 0 and (a or b)]
    if not alone:
        return None

    def residual(c):
        return sum((e - c[0] * f - c[1] * b) ** 2 for f, b, e in zip(flops, nbytes, energy))

    return min(alone, key=residual)
