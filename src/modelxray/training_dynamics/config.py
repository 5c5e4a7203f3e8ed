"""What the dynamics monitor measures and how often: one dataclass per metric family.

Every field is a YAML key under ``train.dynamics`` (``conf/train/finetune_lm.yaml``) and a keyword
of ``DynamicsConfig`` in library use. Sections may be given as plain dicts; unknown keys fail with
the dotted key named.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from modelxray.core.configurable import Configurable
from modelxray.core.errors import ConfigError

SNAPSHOT_DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class ParamChangeConfig(Configurable):
    enabled: bool = True
    # |dW| <= t counts as unchanged (the usual absolute thresholds) ...
    thresholds: list[float] = field(default_factory=lambda: [1e-8, 1e-6, 1e-4])
    # ... and thresholds relative to the step size: multiples of lr x (steps since the snapshot)
    relative_thresholds: list[float] = field(default_factory=lambda: [0.1, 1.0])
    quantiles: list[float] = field(default_factory=lambda: [0.5, 0.9, 0.99])  # of |dW|, on a fixed sample
    quantile_sample: int = 1_000_000  # elements sampled (once, at the snapshot) for the quantiles
    per_layer: bool = True  # layer_<i>/mean_abs_delta, layer_<i>/sparsity, layer_<i>/relative_l2
    per_component: bool = True  # component/<q_proj|...|embeddings|norms>/mean_abs_delta
    layer_threshold: float = 1e-6  # the threshold of layer_<i>/sparsity

    def validate(self) -> None:
        self.require_positive("thresholds", "relative_thresholds", "quantile_sample", "layer_threshold")
        for q in self.quantiles:
            if not 0.0 < q < 1.0:
                raise ConfigError("quantiles", f"each must lie strictly between 0 and 1, got {q}")


@dataclass
class SparseConfig(Configurable):
    """Would a sparse or low-rank update have done the same? Each variant costs one probe forward."""

    enabled: bool = True
    every: int = 1  # at every N-th measurement (and always at the final one): each costs many forwards
    thresholds: list[float] = field(default_factory=lambda: [1e-8, 1e-6, 1e-4])  # keep |dW| > t
    keep_fractions: list[float] = field(default_factory=lambda: [0.01, 0.1])  # keep the top k% by |dW|, per tensor
    random_baseline: bool = True  # the same kept count per tensor, chosen at random (seeded)
    ranks: list[int] = field(default_factory=lambda: [1, 8, 64])  # dW of each weight matrix -> rank r
    lowrank_kl: bool = True  # also the output KL with every matrix's dW truncated to rank r
    svd: str = "auto"  # auto | exact | lowrank (torch.svd_lowrank; auto: lowrank when max rank << size)
    svd_oversample: int = 8
    svd_niter: int = 4
    probe_batch: int = 4  # rows of the fixed held-out probe batch
    probe_seq_len: int = 256
    seed: int = 0

    def validate(self) -> None:
        self.require_positive("every", "ranks", "probe_batch", "probe_seq_len", "svd_niter")
        self.require_non_negative("thresholds")  # 0 keeps every changed entry: the full update
        self.require_non_negative("svd_oversample")
        self.require_choice("svd", ["auto", "exact", "lowrank"])
        for f in self.keep_fractions:
            if not 0.0 < f <= 1.0:
                raise ConfigError("keep_fractions", f"each must lie in (0, 1], got {f}")


@dataclass
class GradConfig(Configurable):
    enabled: bool = True
    per_layer: bool = True
    vanish_below: float = 1e-7  # a layer whose gradient norm is below this is flagged vanishing
    explode_above: float = 1e3  # ... above this, exploding

    def validate(self) -> None:
        self.require_positive("vanish_below", "explode_above")


@dataclass
class OptimConfig(Configurable):
    enabled: bool = True  # Adam-family second-moment statistics and effective step sizes
    per_layer: bool = True


@dataclass
class ActivationConfig(Configurable):
    """Dead and saturated units, per activation module, on the probe batch (one forward)."""

    enabled: bool = False
    dead_below: float = 0.0  # a unit whose output never exceeds this on the probe is dead
    saturated_share: float = 0.99  # a bounded unit at a bound on at least this share of positions is saturated
    saturation_margin: float = 0.01  # "at a bound": within this share of the activation's range
    per_layer: bool = True  # activations/<module>/dead_share (and saturated_share)

    def validate(self) -> None:
        for key in ("saturated_share", "saturation_margin"):
            if not 0.0 < getattr(self, key) <= 1.0:
                raise ConfigError(key, f"must lie in (0, 1], got {getattr(self, key)}")


@dataclass
class SharpnessConfig(Configurable):
    """Loss change under a random, filter-normalised perturbation of the weights (forwards only)."""

    enabled: bool = False
    sigma: float = 0.01  # each tensor's perturbation norm, as a share of the tensor's own norm
    samples: int = 4  # random directions averaged (each one probe forward)
    seed: int = 0

    def validate(self) -> None:
        self.require_positive("sigma", "samples")


_SECTIONS = {
    "param_change": ParamChangeConfig,
    "sparse": SparseConfig,
    "grad": GradConfig,
    "optim": OptimConfig,
    "activations": ActivationConfig,
    "sharpness": SharpnessConfig,
}


def train_dynamics_defaults() -> dict[str, Any]:
    """``train.dynamics``: every section with its defaults (the interval is ``train.interval``)."""
    return {"snapshot_dtype": "float32", "snapshot_device": "cpu", **{key: cls() for key, cls in _SECTIONS.items()}}


def section(cls: type, value: Any, key: str) -> Any:
    """A section dataclass from a dict (YAML) or an instance; unknown keys name ``key.<field>``."""
    if isinstance(value, cls):
        return value
    if value is None:
        return cls()
    if not isinstance(value, dict):
        raise ConfigError(key, f"expected a mapping of {cls.__name__} keys, got {value!r}")
    allowed = {f.name for f in dataclasses.fields(cls)}
    for k in value:
        if k not in allowed:
            raise ConfigError(f"{key}.{k}", f"unknown key; valid keys: {', '.join(sorted(allowed))}")
    try:
        return cls(**value)
    except ConfigError as exc:
        raise exc.under(key) from None


def check_snapshot_device(device: str) -> None:
    """``cpu``, or ``cuda``/``cuda:N`` where torch sees that GPU: a snapshot on the GPU costs no copy
    to the host at each interval, but holds one model's worth of GPU memory."""
    import torch

    value = str(device)
    if value == "cpu":
        return
    if value != "cuda" and not (value.startswith("cuda:") and value[5:].isdigit()):
        raise ConfigError("snapshot_device", f"must be cpu, cuda or cuda:N, got {value!r}")
    if not torch.cuda.is_available():
        raise ConfigError("snapshot_device", f"{value}: torch sees no GPU on this machine; use cpu")
    index = int(value[5:]) if ":" in value else 0
    if index >= torch.cuda.device_count():
        raise ConfigError(
            "snapshot_device", f"{value}: this machine has {torch.cuda.device_count()} GPU(s); use cuda:0"
        )


@dataclass
class DynamicsConfig(Configurable):
    """Settings of :class:`~modelxray.training_dynamics.monitor.DynamicsMonitor`."""

    interval: int = 100  # measure every N optimizer steps against the snapshot of N steps before
    snapshot_dtype: str = "float32"  # float32 | bfloat16 | fp16: snapshots are kept in this dtype
    snapshot_device: str = "cpu"  # cpu, or cuda (cuda:N) with a GPU: where the snapshot's copy is kept
    param_change: Any = None
    sparse: Any = None
    grad: Any = None
    optim: Any = None
    activations: Any = None  # dead and saturated units (off by default: one probe forward)
    sharpness: Any = None  # loss change under a relative weight perturbation (off by default: samples forwards)

    def validate(self) -> None:
        self.require_positive("interval")
        self.require_choice("snapshot_dtype", SNAPSHOT_DTYPES)
        check_snapshot_device(self.snapshot_device)
        for key, cls in _SECTIONS.items():
            setattr(self, key, section(cls, getattr(self, key), key))

    @classmethod
    def minimal(cls, interval: int = 500) -> DynamicsConfig:
        """Global parameter-change statistics only, rarely: cheap enough for any run."""
        return cls(
            interval=interval,
            param_change=ParamChangeConfig(per_layer=False, per_component=False, quantiles=[]),
            sparse=SparseConfig(enabled=False),
            grad=GradConfig(enabled=False, per_layer=False),
            optim=OptimConfig(enabled=False),
        )

    @classmethod
    def comprehensive(cls, interval: int = 50) -> DynamicsConfig:
        """Every family, per layer and per component, sparse and low-rank quality with random baselines."""
        return cls(
            interval=interval,
            param_change=ParamChangeConfig(),
            sparse=SparseConfig(),
            grad=GradConfig(),
            optim=OptimConfig(),
            activations=ActivationConfig(enabled=True),
            sharpness=SharpnessConfig(enabled=True),
        )
