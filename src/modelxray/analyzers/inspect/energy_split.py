"""A forward's energy split among its operations, three ways, each column saying where it comes from:

- ``energy_j``: the forward's energy (codecarbon's, idle draw included) by each op's share of the
  profiled time (``run._energy_by_op``); ESTIMATED, since time share is not power share.
- ``dynamic_energy_j``: the dynamic energy (the forward's energy less the idle draw over its time)
  by the static model ``e_flop x FLOPs + e_byte x bytes`` (``metrics/energy_model.py``), its
  coefficients fitted on the RAPL counters where those could be read, documented constants otherwise;
  the parts add up to the dynamic energy.
- ``rapl_energy_j``: RAPL counters read around each op of repeated forwards; MEASURED, where the CPU
  exposes readable counters (one line says why not elsewhere).

The idle draw is measured by the same counters with the process asleep, or, without them, is what
codecarbon's power model charges a process doing nothing."""

from __future__ import annotations

from modelxray.measure.energy import EnergyReport, idle_power_of_model
from modelxray.measure.rapl import RaplMeter, idle_power_rapl
from modelxray.metrics import energy_model

TIME_SHARE = "ESTIMATED: the forward's energy (idle draw included) by each op's share of the profiled time"


def idle(energy: EnergyReport, meter: RaplMeter | None, seconds: float) -> tuple[float | None, str]:
    """The idle power to subtract and how it was found: the RAPL counters with the process asleep
    when the forward's energy was measured by counters too (both then cover the whole machine),
    else what the power model charges an idle process."""
    if meter is not None and energy.measured:
        watts = idle_power_rapl(meter, seconds)
        return watts, f"MEASURED by the RAPL counters ({meter.describe()}) over {seconds:g} s with the process idle"
    return idle_power_of_model(energy)


def dynamic_per_forward(energy: EnergyReport, idle_w: float | None, rapl_window: tuple[float, float] | None):
    """The dynamic energy of one forward and how it was found: the RAPL counters over the energy
    measurement (``rapl_window``: joules and seconds) or codecarbon's figure, less the idle power over
    the same time. None when the idle power is not known."""
    if idle_w is None:
        return None, "not separated: the idle power is not known"
    n = max(energy.iterations, 1)
    if rapl_window is not None and energy.measured:
        joules, seconds = rapl_window
        return energy_model.dynamic_energy(joules, idle_w, seconds) / n, "MEASURED (RAPL) less the idle power"
    status = "MEASURED" if energy.measured else "ESTIMATED"
    return energy_model.dynamic_energy(energy.energy_j, idle_w, energy.seconds) / n, f"{status} less the idle power"


def coefficients(roof: list[dict], rapl_rows: list[dict], idle_w: float, cfg) -> tuple[float, float, str]:
    """``(e_flop, e_byte)`` in joules and how they were found: fitted on the RAPL energy of each op
    (less the idle power over its time) where at least two ops of the roofline were counted, else
    the configured constants (``energy_pj_per_flop``, ``energy_pj_per_byte``)."""
    counted = {r["op"]: r for r in rapl_rows}
    pairs = [(r, counted[r["op"]]) for r in roof if r["op"] in counted]
    if len(pairs) >= 2:
        dyn = [max(0.0, c["energy_j"] - idle_w * c["time_s"]) for _, c in pairs]
        fit = energy_model.fit_coefficients([r["flops"] for r, _ in pairs], [r["bytes"] for r, _ in pairs], dyn)
        if fit is not None:
            return fit[0], fit[1], f"fitted on the RAPL energy of {len(pairs)} op groups (less the idle power)"
    how = (
        f"constants {cfg.energy_pj_per_flop:g} pJ per FLOP and {cfg.energy_pj_per_byte:g} pJ per byte "
        "(analyzer.inspect.energy_pj_per_flop, energy_pj_per_byte; Horowitz, ISSCC 2014, by default), "
        "scaled to the dynamic energy"
    )
    return cfg.energy_pj_per_flop * 1e-12, cfg.energy_pj_per_byte * 1e-12, how


def split(
    roof: list[dict],
    energy: EnergyReport,
    cfg,
    meter: RaplMeter | None,
    rapl_window: tuple[float, float] | None,
    rapl_rows: list[dict],
    rapl_note: str,
) -> tuple[dict, dict]:
    """Fill the roofline rows' ``dynamic_energy_j`` and ``rapl_energy_j``; the metrics and the data
    (``data["energy_split"]``) that say which method each figure comes from. ``rapl_window`` is the
    counters' joules and seconds over the energy measurement, ``rapl_note`` how the per-op counters
    were read or why they were not."""
    idle_w, idle_how = idle(energy, meter, cfg.idle_seconds)
    dyn, dyn_how = dynamic_per_forward(energy, idle_w, rapl_window)
    metrics: dict[str, float] = {}
    data = {"idle_power": idle_how, "dynamic_energy": dyn_how, "time_share": TIME_SHARE, "rapl": rapl_note}
    if idle_w is not None:
        metrics["idle_power_w"] = idle_w
    if dyn is not None:
        metrics["dynamic_energy_j_per_forward"] = dyn
        e_flop, e_byte, how = coefficients(roof, rapl_rows, idle_w or 0.0, cfg)
        for r, part in zip(roof, energy_model.attribute(roof, dyn, e_flop, e_byte)):
            r["dynamic_energy_j"] = part
        ratio = energy_model.scale(roof, dyn, e_flop, e_byte)
        if ratio is not None:
            metrics["energy_model_scale"] = ratio
        metrics["energy_model_pj_per_flop"], metrics["energy_model_pj_per_byte"] = e_flop * 1e12, e_byte * 1e12
        data["energy_model"] = how
    counted = {r["op"]: r["energy_j"] for r in rapl_rows}
    for r in roof:
        if r["op"] in counted:
            r["rapl_energy_j"] = counted[r["op"]]
    if rapl_rows:
        metrics["rapl_op_groups"] = float(len(rapl_rows))
    return metrics, data
