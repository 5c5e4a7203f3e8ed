"""Inspect analyzer: what is inside a model (or a weights file), what it costs to run, and where
to prune or quantize.

Parts, each optional by config: per-tensor parameter statistics aggregated by layer type
(``weights.py``, ``metrics/tensor_stats.py``); the architecture and the input it takes
(``models/architecture.py``); FLOPs per module and op with attention counted for any
implementation, bytes per op, time per op and a roofline against the measured peak
(``measure/flops.py``, ``op_profile.py``, ``peak.py``); energy and CO2 with codecarbon
(``measure/energy.py``), split per op by time share, by a FLOPs-and-bytes energy model and by RAPL
counters where readable (``energy_split.py``); memory layout of every tensor and the cache level of
every op (``metrics/memory_layout.py``); a compressibility score (``metrics/compressibility.py``);
CPU/GPU utilisation (``measure/utilization.py``); recommendations with the
numbers behind them (``advice.py``). The full text report is
``comprehensive_model_analysis.txt`` (``text_report.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from modelxray.analyzers.base import Analyzer
from modelxray.core.errors import ConfigError
from modelxray.data.example_inputs import normalize_inputs
from modelxray.kinds.base import Kind
from modelxray.measure.energy import check_country, check_cpu_tdp_w
from modelxray.metrics.energy_model import PJ_PER_BYTE, PJ_PER_FLOP

SPECTRAL = ("power", "exact", "none")


@dataclass
class InspectAnalyzer(Analyzer):
    name: ClassVar[str] = "inspect"
    plots_module: ClassVar[str] = "modelxray.analyzers.inspect.plots"
    run_module: ClassVar[str] = "modelxray.analyzers.inspect.run"
    insights_module: ClassVar[str] = "modelxray.analyzers.inspect.insights"
    studies_broken_weights: ClassVar[bool] = True  # it counts each tensor's NaN and Inf values
    model_kinds: ClassVar[tuple[type, ...]] = (Kind,)  # every kind, a weights-only file and a generic module included
    bins: int = 256  # histogram bins per tensor (entropy is of this histogram)
    outlier_k: float = 3.0  # outlier: |x - mean| > k std
    small_threshold: float = 1e-3  # "near zero": |x| < small_threshold x max|x|
    spectral: str = "power"  # power (converged to spectral_rtol, error bound reported) | exact | none
    spectral_rtol: float = 1e-3
    spectral_max_iters: int = 300
    sensitivity_bits: int = 4  # bit width of the quantization-sensitivity indicator
    compute: bool = True  # false: parameters only (weights-only files never run)
    batch_size: int = 1
    seq_len: int | None = 256  # language models: tokens per sequence (null = dataset.seq_len)
    input_shape: list[int] | None = None  # one input, without the batch dim, e.g. [3, 224, 224]; null = inferred
    # named inputs, shapes with the batch dim (ids int64): name -> shape or {shape, dtype, high}
    inputs: dict[str, Any] | None = None  # e.g. {pixel_values: [1, 3, 224, 224], input_ids: [1, 16]}
    profile_warmup: int = 2
    profile_iters: int = 5
    peak_matmul_size: int = 2048  # square matmul that measures the peak FLOP/s of the roofline
    energy: bool = True
    energy_seconds: float = 10.0
    country_iso_code: str = "USA"  # grid carbon intensity of this country (ISO 3166 alpha-3)
    power_sample_seconds: float = 1.0
    cpu_tdp_w: float | None = None  # CPU TDP (W) for estimated power (no RAPL); null = codecarbon's guess
    # the static energy model splits the dynamic energy per op by e_flop x FLOPs + e_byte x bytes
    energy_pj_per_flop: float = (
        PJ_PER_FLOP  # e_flop in pJ (Horowitz, ISSCC 2014: FP32 multiply-add); fitted on RAPL where readable
    )
    energy_pj_per_byte: float = (
        PJ_PER_BYTE  # e_byte in pJ (Horowitz, ISSCC 2014: a DRAM access); fitted on RAPL where readable
    )
    idle_seconds: float = 0.5  # idle power from the RAPL counters over this long asleep (only where RAPL is readable)
    rapl_seconds: float = 1.0  # RAPL read around each op of forwards repeated this long (only where RAPL is readable)
    utilization_interval_s: float = 0.2
    top: int = 10  # rows in the top-N tables and recommendations
    prune_min: float = 0.3  # prune_potential from which a layer is recommended for pruning
    precision_ratio: float = 1.25  # quant_sensitivity / model median from which a layer should keep more bits
    advice_min_numel: int = 1024  # prune/precision advice: weight matrices (2+ dims > 1) of at least this many elements
    roof_share_min: float = 0.05  # an op under this share of both the memory and compute roofs is latency-bound
    structured_prune_share: float = (
        0.1  # structured pruning: share of each layer's output units (neurons, channels) removed, weakest by L2 norm
    )
    structured_layers: int = 8  # largest layers whose units are removed one layer at a time (a forward each); 0 = none

    def validate(self) -> None:
        self.require_positive(
            "bins",
            "outlier_k",
            "small_threshold",
            "spectral_rtol",
            "spectral_max_iters",
            "sensitivity_bits",
            "batch_size",
            "profile_iters",
            "peak_matmul_size",
            "energy_seconds",
            "power_sample_seconds",
            "energy_pj_per_flop",
            "energy_pj_per_byte",
            "idle_seconds",
            "rapl_seconds",
            "utilization_interval_s",
            "top",
            "precision_ratio",
        )
        self.require_positive("seq_len", "input_shape", allow_none=True)
        self.require_non_negative("profile_warmup", "prune_min", "advice_min_numel", "structured_layers")
        if not 0.0 < self.structured_prune_share < 1.0:
            raise ConfigError(
                "structured_prune_share", f"must lie strictly between 0 and 1, got {self.structured_prune_share}"
            )
        if not 0.0 <= self.roof_share_min < 1.0:
            raise ConfigError("roof_share_min", f"must lie in [0, 1), got {self.roof_share_min}")
        self.require_choice("spectral", SPECTRAL)
        check_cpu_tdp_w(self.cpu_tdp_w)
        check_country(self.country_iso_code)
        if self.inputs is not None:
            if self.input_shape is not None:
                raise ConfigError("inputs", "set input_shape (one tensor) or inputs (named tensors), not both")
            normalize_inputs(self.inputs)
        if self.sensitivity_bits > 16:
            raise ConfigError("sensitivity_bits", f"must be in 1..16, got {self.sensitivity_bits}")

    def summary_lead(self, result) -> list[str]:
        """The executive summary: what the model is, its cost, and the three findings that matter most."""
        from modelxray.core.configurable import implementation

        return implementation("modelxray.analyzers.inspect.summary").executive_summary(result)

    def preflight(self, subject) -> None:
        """A model that runs needs an input before compute, energy and profiling start: inferred
        (``models/input_inference.py``) or configured, else one ConfigError line naming the key to set."""
        from modelxray.analyzers.inspect.inputs import input_spec

        input_spec(self, subject)
