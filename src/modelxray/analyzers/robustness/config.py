"""Robustness analyzer: how fast quality falls under adversarial attacks, weight noise,
quantization-step noise and input perturbations.

Language models are attacked in input-embedding space (eps relative to the embedding std), noised
in their linear weights, and fed text with dropped or substituted tokens. Classifiers are attacked
in input space inside the feature range (eps a fraction of it) and fed inputs with blanked or
randomised features. The perturbation families are task-agnostic; a harness per task
(``perturb/lm_harness.py``, ``perturb/classifier_harness.py``) evaluates them. One clean pass is computed first and every family is compared against it. Metrics are named
``<family>_<level>_<metric>`` (``fgsm_0.03_perplexity``, ``quant_noise_4bit_kl``...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from modelxray.analyzers.base import Analyzer
from modelxray.core.errors import ConfigError
from modelxray.core.result import Result, RunContext

NOISE_TARGETS = ("linear", "matrices", "all")  # as in modelxray.perturb.weight_noise
STEP_GRANULARITY = ("channel", "tensor")


@dataclass
class RobustnessAnalyzer(Analyzer):
    name: ClassVar[str] = "robustness"
    plots_module: ClassVar[str] = "modelxray.analyzers.robustness.plots"
    tasks: ClassVar[tuple[str, ...]] = ("causal_lm", "classification")
    eval_windows: int = 8  # language models: dataset windows (the clean pass is computed once)
    batch_size: int = 4  # windows per forward pass
    kl_windows: int = 8  # windows whose clean distribution is kept for exact KL
    eval_samples: int | None = None  # classifiers: test samples (null = all)
    sample_batch_size: int = 256  # classifiers: samples per forward pass
    pgd_samples: int | None = None  # classifiers: samples attacked by PGD (null = all)
    fgsm_eps: list[float] = field(default_factory=lambda: [0.01, 0.03, 0.1])
    pgd_eps: list[float] = field(
        default_factory=lambda: [0.01, 0.03]
    )  # PGD saturates near FGSM's strongest points from eps 0.1 on the default model
    pgd_steps: int = 5
    pgd_step_size: float | None = None  # per step, as a fraction of eps; null = 2.5 / steps
    pgd_random_start: bool = False
    pgd_windows: int = 2  # PGD costs steps x (forward + backward) per window
    weight_noise_levels: list[float] = field(default_factory=lambda: [0.03, 0.1])
    noise_targets: str = "linear"  # linear | matrices | all
    seeds: int = 2  # draws of every random perturbation; metrics are means, *_std the spread
    quant_noise_bits: list[int] = field(default_factory=lambda: [8, 6, 4])
    quant_noise_granularity: str = "channel"  # channel | tensor
    dropout_rates: list[float] = field(default_factory=lambda: [0.05, 0.1, 0.2])
    substitution_rates: list[float] = field(default_factory=lambda: [0.05, 0.1, 0.2])

    def validate(self) -> None:
        self.require_positive("eval_windows", "batch_size", "seeds", "pgd_windows", "quant_noise_bits")
        self.require_positive("pgd_step_size", "eval_samples", "pgd_samples", allow_none=True)
        self.require_positive("sample_batch_size")
        self.require_non_negative("kl_windows", "fgsm_eps", "pgd_eps", "pgd_steps", "weight_noise_levels")
        self.require_choice("noise_targets", NOISE_TARGETS)
        self.require_choice("quant_noise_granularity", STEP_GRANULARITY)
        if self.pgd_eps and self.pgd_steps == 0:
            raise ConfigError("pgd_steps", "is 0 while pgd_eps is set: use pgd_steps >= 1, or pgd_eps=[] to skip PGD")
        for key in ("dropout_rates", "substitution_rates"):
            bad = [r for r in getattr(self, key) if not 0.0 <= r <= 1.0]
            if bad:
                raise ConfigError(key, f"rates must lie in [0, 1]; got {bad}")
        if any(b > 16 for b in self.quant_noise_bits):
            raise ConfigError("quant_noise_bits", f"bits must be in 1..16; got {self.quant_noise_bits}")

    def preflight(self, subject) -> None:
        if subject.task == "causal_lm" and subject.data is None:
            raise ConfigError("analyzer.robustness", "needs a dataset of token windows (not a user DataLoader)")
        if subject.task == "classification" and not hasattr(subject.data, "feature_range"):
            raise ConfigError("dataset", "a classifier needs a classification dataset, e.g. dataset=digits")

    def run(self, subject, ctx: RunContext) -> Result:
        from modelxray.analyzers.robustness.run import run

        return run(self, subject, ctx)
