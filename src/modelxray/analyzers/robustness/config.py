"""Robustness analyzer: how fast quality falls under adversarial attacks, weight noise,
quantization-step noise and input perturbations.

Language models are attacked in input-embedding space (eps relative to the embedding std), noised
in their linear weights, and fed text with dropped or substituted tokens. Classifiers are attacked
in input space inside the feature range (eps a fraction of it) and fed inputs with blanked or
randomised features; image classifiers (data with ``meta["image_shape"]``) also get Gaussian
pixel noise, Gaussian blur and occlusion patches (an image levels key set on a model without
images is a ConfigError; left at null it is skipped with a note). Encoders, seq2seq models and text
classifiers are attacked on the token embeddings their encoder reads and fed text with substituted
tokens; speech recognisers hear noise at set signal-to-noise ratios, shifted and sped-up clips, and
are scored by word error rate. Detectors, segmenters and backbones are attacked in pixel space on
their task's loss and get the image corruptions; generative vision-language models are attacked in
pixel space on their answer's loss and fed prompts with substituted tokens. The perturbation
families are task-agnostic; a harness per family of kinds (``run._HARNESSES``, keyed by kind class:
``perturb/lm_harness.py``, ``classifier_harness.py``, ``text_task_harness.py``, ``speech_harness.py``,
``vision_task_harness.py``, ``vision_language_harness.py``) evaluates them. One clean pass is computed first and every family is compared against it. Metrics are named
``<family>_<level>_<metric>`` (``fgsm_0.03_perplexity``, ``quant_noise_4bit_kl``...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from modelxray.analyzers.base import Analyzer
from modelxray.core.errors import ConfigError
from modelxray.core.result import Result
from modelxray.kinds.causal_lm import CausalLM
from modelxray.kinds.classifier import Classifier
from modelxray.kinds.labelled_images import LabelledImagesKind
from modelxray.kinds.speech import SpeechRecognizer
from modelxray.kinds.table import kind_of
from modelxray.kinds.windows import WindowsKind

NOISE_TARGETS = ("linear", "matrices", "all")  # as in modelxray.perturb.weight_noise
STEP_GRANULARITY = ("channel", "tensor")
OCCLUSION_FILLS = ("mid", "low")  # as in modelxray.perturb.classifier_harness
# image corruption family -> its levels key; a key left at null takes its levels from IMAGE_GRIDS
IMAGE_KEYS = {"gaussian_noise": "gaussian_noise_sigmas", "blur": "blur_sigmas", "occlusion": "occlusion_sides"}
IMAGE_GRIDS = {
    "default": {
        "gaussian_noise_sigmas": [0.1, 0.2, 0.4],
        "blur_sigmas": [0.5, 1.0, 2.0],
        "occlusion_sides": [0.25, 0.5, 0.75],
    },
    "full": {
        "gaussian_noise_sigmas": [0.02, 0.05, 0.1, 0.2, 0.3, 0.5],
        "blur_sigmas": [0.25, 0.5, 1.0, 1.5, 2.0, 3.0],
        "occlusion_sides": [0.1, 0.25, 0.4, 0.5, 0.75],
    },
}


# vision tasks: each one's quality against the labels and its agreement with the clean outputs
VISION_KEYS = (
    "map",
    "map_50",
    "miou",
    "pixel_accuracy",
    "knn_accuracy",
    "agree_map_50",
    "pixel_agree",
    "embedding_drift",
)

# the per-level robustness table in summary_report.md's appendix, in this order, where any row has the column
SUMMARY_COLUMNS = (
    "family",
    "level",
    "windows",
    "samples",
    "utterances",
    "images",
    "seeds",
    "loss",
    "loss_se",
    "perplexity",
    "perplexity_std",
    "accuracy",
    "accuracy_se",
    "accuracy_std",
    "wer",
    "wer_se",
    "wer_std",
    "cer",
    "transcript_change",
    *VISION_KEYS,
    "top1_agree",
    "kl",
    "gap",
    "gap_se",
    "fgsm_perplexity",
    "fgsm_accuracy",
    "clean_perplexity",
    "clean_accuracy",
    "tokens_scored",
    "eps_abs",
)


@dataclass
class RobustnessAnalyzer(Analyzer):
    name: ClassVar[str] = "robustness"
    # streamed from disk: weight and quantization noise (every level and seed in one read); not input attacks
    streams_blocks: ClassVar[bool] = True
    plots_module: ClassVar[str] = "modelxray.analyzers.robustness.plots"
    run_module: ClassVar[str] = "modelxray.analyzers.robustness.run"
    insights_module: ClassVar[str] = "modelxray.analyzers.robustness.insights"
    # every kind but a generic module and weights alone: encoders, seq2seq, speech and generative
    # vision-language models are WindowsKind's; detectors, segmenters and backbones LabelledImagesKind's
    model_kinds: ClassVar[tuple[type, ...]] = (CausalLM, Classifier, WindowsKind, LabelledImagesKind)
    eval_windows: int = 8  # language models: dataset windows (the clean pass is computed once)
    batch_size: int = 4  # windows per forward pass
    attack_batch_size: int = 1  # language models: windows per attack gradient (its backward holds their activations)
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
    degradation_tolerance: float = 0.1  # the insights name the first level whose quality moves more than this share from clean (WER: this much, absolute)
    agreement_floor: float = 0.9  # the verdicts also need this share of outputs to agree with the clean ones (top-1, pixels; speech: 1 - WER vs clean transcripts)
    kl_ceiling: float = 0.25  # the verdicts also bound KL(clean || perturbed), where measured: at most this many nats
    noise_targets: str = "linear"  # linear | matrices | all
    seeds: int = 2  # draws of every random perturbation; metrics are means, *_std the spread
    quant_noise_bits: list[int] = field(default_factory=lambda: [8, 6, 4])
    quant_noise_granularity: str = "channel"  # channel | tensor
    dropout_rates: list[float] = field(default_factory=lambda: [0.05, 0.1, 0.2])
    substitution_rates: list[float] = field(default_factory=lambda: [0.05, 0.1, 0.2])
    gaussian_noise_sigmas: list[float] | None = None  # images: pixel noise std; null = [0.1, 0.2, 0.4]; [] = off
    blur_sigmas: list[float] | None = None  # images: Gaussian blur std in pixels; null = [0.5, 1, 2]; [] = off
    occlusion_sides: list[float] | None = None  # images: patch side / image side in [0, 1]; null = [0.25, 0.5, 0.75]
    occlusion_fill: str = "mid"  # mid (grey: the middle of the feature range) | low (its bottom: blank digits)
    image_grid: str = "default"  # default | full (wider): the levels of the image keys left at null
    snr_db: list[float] = field(default_factory=lambda: [20.0, 10.0, 0.0])  # speech: white noise, signal/noise in dB
    time_shifts: list[float] = field(default_factory=lambda: [0.1, 0.25, 0.5])  # speech: delay of each clip, seconds
    speed_factors: list[float] = field(default_factory=lambda: [0.9, 1.1, 1.25])  # speech: playback speed
    utterances: int = 16  # speech: utterances transcribed per perturbation (the clean pass included)
    max_new_tokens: int = 48  # speech (encoder-decoder): the longest transcript decoded
    vision_bootstrap: int = 0  # detectors, segmenters: resamples for mAP / mean IoU errors per level (0 = none)
    knn_k: int = 5  # vision backbones: neighbours voting in the k-NN accuracy of the embeddings

    def validate(self) -> None:
        self.require_positive(
            "eval_windows", "batch_size", "attack_batch_size", "seeds", "pgd_windows", "quant_noise_bits"
        )
        self.require_positive("pgd_step_size", "eval_samples", "pgd_samples", allow_none=True)
        self.require_positive("sample_batch_size", "utterances", "max_new_tokens", "knn_k")
        self.require_non_negative("vision_bootstrap")
        self.require_non_negative("time_shifts")
        if any(not f > 0 for f in self.speed_factors):
            raise ConfigError(
                "speed_factors", f"speed factors must be positive (1 = unchanged); got {self.speed_factors}"
            )
        self.require_non_negative("kl_windows", "fgsm_eps", "pgd_eps", "pgd_steps", "weight_noise_levels")
        self.require_choice("noise_targets", NOISE_TARGETS)
        self.require_choice("quant_noise_granularity", STEP_GRANULARITY)
        if self.pgd_eps and self.pgd_steps == 0:
            raise ConfigError("pgd_steps", "is 0 while pgd_eps is set: use pgd_steps >= 1, or pgd_eps=[] to skip PGD")
        for key in ("dropout_rates", "substitution_rates"):
            bad = [r for r in getattr(self, key) if not 0.0 <= r <= 1.0]
            if bad:
                raise ConfigError(key, f"rates must lie in [0, 1]; got {bad}")
        self.require_non_negative("gaussian_noise_sigmas", "blur_sigmas")
        self.require_choice("occlusion_fill", OCCLUSION_FILLS)
        self.require_choice("image_grid", IMAGE_GRIDS)
        bad = [r for r in self.occlusion_sides or [] if not 0.0 <= r <= 1.0]
        if bad:
            raise ConfigError(
                "occlusion_sides", f"patch sides (fractions of the image side) must lie in [0, 1]; got {bad}"
            )
        if not 0.0 <= self.agreement_floor <= 1.0:
            raise ConfigError(
                "agreement_floor", f"is a share of agreeing outputs in [0, 1]; got {self.agreement_floor}"
            )
        self.require_non_negative("kl_ceiling")
        if any(b > 16 for b in self.quant_noise_bits):
            raise ConfigError("quant_noise_bits", f"bits must be in 1..16; got {self.quant_noise_bits}")

    def stream_refusal(self, quant=None) -> tuple[str, str, str] | None:
        """Weight and quantization noise stream; input attacks need a backward pass through the whole
        model, and token dropout and substitution windows of their own."""
        if quant is not None and getattr(quant, "name", "none") != "none":
            return (
                "analyzer.robustness",
                "streamed from disk, the noise goes on the weights as stored, not on the quantized model quant= makes",
                "drop quant= (robustness of the model as stored), or use runtime.offload=none",
            )
        asked = [k for k in ("fgsm_eps", "pgd_eps", "dropout_rates", "substitution_rates") if getattr(self, k)]
        if not asked:
            return None
        return (
            f"analyzer.robustness.{asked[0]}",
            f"{', '.join(asked)} {'need' if len(asked) > 1 else 'needs'} the whole model in memory, which a model "
            "streamed from disk never is (input attacks a backward pass through it, token perturbations windows of "
            "their own)",
            f"set {', '.join(f'{k}=[]' for k in asked)} (weight and quantization noise stream), or use runtime.offload=none",
        )

    def preflight(self, subject) -> None:
        kind = kind_of(subject)
        if isinstance(kind, CausalLM) and subject.data is None and subject.batches is None:
            raise ConfigError(
                "analyzer.robustness",
                "needs token windows: a text dataset (dataset=...) or a DataLoader of token batches",
            )
        if isinstance(kind, Classifier) and not hasattr(subject.data, "feature_range"):
            raise ConfigError("dataset", "a classifier needs a classification dataset, e.g. dataset=digits")
        self.image_levels(subject)  # levels set explicitly for a model without images: one line

    def image_levels(self, subject) -> tuple[dict[str, list[float]], str | None]:
        """Levels of each image corruption family that runs on ``subject``, and why none run when
        the data are not images (language models, feature vectors): a note, not an error, unless
        a levels key was set explicitly (not null and not []), which is a ConfigError naming it."""
        shape = image_shape_of(subject)
        if shape is not None:
            grid = IMAGE_GRIDS[self.image_grid]
            levels = {f: grid[k] if getattr(self, k) is None else getattr(self, k) for f, k in IMAGE_KEYS.items()}
            return {f: v for f, v in levels.items() if v}, None
        kind = kind_of(subject)
        if isinstance(kind, SpeechRecognizer):
            why = "a speech model's inputs are audio, not images"
        elif not isinstance(kind, Classifier):
            why = "a language model's inputs are tokens, not images"
        else:
            name = getattr(subject.data, "name", "the dataset")
            why = f"{name} holds feature vectors, not images (no meta['image_shape'])"
        for key in IMAGE_KEYS.values():
            if getattr(self, key):
                raise ConfigError(key, f"image corruptions need image data and {why}; drop the key or set []")
        return {}, f"image corruptions ({', '.join(IMAGE_KEYS)}) skipped: {why}"

    def headline(self, result: Result) -> dict[str, float]:
        """None: the clean values lead the summary table, every per-level metric stays in the JSON
        and MLflow (and the appendix of summary_report.md)."""
        return {}

    def summary_tables(self, result: Result) -> dict[str, list[dict]]:
        """One table: the clean pass, then per family where quality halves (with its standard
        error), the strongest level's quality, agreement and KL, and the first level out of bounds
        (``summary.py``)."""
        from modelxray.analyzers.robustness.summary import summary_rows

        if not result.tables.get("robustness"):
            return {}
        return {"robustness summary": summary_rows(result, self)}

    def appendix_tables(self, result: Result) -> dict[str, list[dict]]:
        """The per-level table at the end of summary_report.md, with the columns a reader compares,
        the same for every row: what each row was measured on (``windows`` or ``samples``: PGD runs
        on fewer), its quality with the standard error or spread, and PGD's FGSM and clean values on
        its own windows. Every column stays in the JSON and MLflow."""
        rows = result.tables.get("robustness") or []
        present = {k for r in rows for k, v in r.items() if not isinstance(v, (list, dict))}
        columns = [c for c in SUMMARY_COLUMNS if c in present]
        return {"per level": [{c: r.get(c, "") for c in columns} for r in rows]}


def image_shape_of(subject) -> tuple[int, int, int] | None:
    """(C, H, W) of a classifier's test inputs when its data are images (``meta["image_shape"]``
    holding each sample's features: (1, 8, 8) for the flat 64 digits pixels), else None."""
    data, kind = subject.data, kind_of(subject)
    if isinstance(kind, LabelledImagesKind) and getattr(data, "images", None) is not None:
        return tuple(int(s) for s in data.images.shape[1:])
    shape = getattr(data, "meta", {}).get("image_shape") if isinstance(kind, Classifier) else None
    if shape is None or len(shape) != 3 or getattr(data, "x_test", None) is None or data.x_test.shape[0] == 0:
        return None
    shape = tuple(int(s) for s in shape)
    return shape if math.prod(shape) == data.x_test[0].numel() else None
