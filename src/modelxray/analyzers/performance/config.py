"""Performance analyzer config: quality (a language model: loss, perplexity, bits per byte, top-k
next-token accuracy; a classifier: loss, top-k accuracy with a confidence interval; a generic model:
agreement with its unquantized outputs), speed (latency percentiles, throughput per batch size), memory, per-module forward time, and the thresholds of its
deployment insights."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from modelxray.analyzers.base import Analyzer
from modelxray.core.errors import ConfigError
from modelxray.core.result import Result
from modelxray.kinds.causal_lm import CausalLM
from modelxray.kinds.classifier import Classifier
from modelxray.kinds.generic import Generic
from modelxray.kinds.labelled_images import LabelledImagesKind
from modelxray.kinds.table import kind_of
from modelxray.kinds.windows import WindowsKind
from modelxray.metrics.degenerate import COLLAPSE_SHARE

PROTOCOLS = ("disjoint", "sliding", "lm_eval_rolling")  # implemented by modelxray.metrics.windows.make_windows
# keys that only mean something for token windows, with the value that leaves them unused
LM_ONLY = {"protocol": "disjoint", "stride": None, "prefix_token": "none", "speed_seq_len": None, "kl_windows": 4}


@dataclass
class PerformanceAnalyzer(Analyzer):
    name: ClassVar[str] = "performance"
    plots_module: ClassVar[str] = "modelxray.analyzers.performance.plots"
    run_module: ClassVar[str] = "modelxray.analyzers.performance.run"
    insights_module: ClassVar[str] = "modelxray.analyzers.performance.insights"
    streams_blocks: ClassVar[bool] = True  # perplexity and agreement; speed and per-module time are skipped
    # language models, classifiers, generic modules, and the kinds scored on their own examples: windows
    # (masked LMs, seq2seq, text classifiers, speech, vision-language) and labelled images
    model_kinds: ClassVar[tuple[type, ...]] = (CausalLM, Classifier, Generic, WindowsKind, LabelledImagesKind)

    # quality. A language model: loss, perplexity, bits per byte, top-k next-token accuracy over
    # token windows. A classifier: loss, top-k accuracy (95% interval) on the dataset's test split, and
    # after quantization top-1 agreement, KL and the paired change in accuracy and loss (each with its
    # error) against the unquantized model. A generic model:
    # agreement of its outputs with the unquantized ones on its example inputs
    protocol: str = "disjoint"  # disjoint | sliding | lm_eval_rolling (lm-evaluation-harness's protocol)
    stride: int | None = None  # sliding: tokens newly scored per window (null = seq_len)
    prefix_token: str = "none"  # none | bos | eos: prepended so the first token is scored too
    batch_size: int = 4  # windows (a classifier: test examples) per forward pass while scoring
    top_k: list[int] = field(default_factory=lambda: [1, 5, 10])  # accuracy at these k (a classifier: k < n_classes)
    # against the reference (the model before quant=, or reference=...): top-1 agreement and the paired
    # loss change on every window, KL on the first kl_windows (their distributions are kept: windows x
    # seq_len x vocabulary x 4 bytes, in memory and in the reference cache)
    kl_windows: int = 4  # language models: windows whose reference distributions are kept for exact KL
    # speed: warm-up, then timed forward passes per batch size (sequences, or test examples)
    speed_batch_sizes: list[int] = field(default_factory=lambda: [1, 4])  # batch sizes timed
    speed_seq_len: int | None = None  # tokens per timed sequence (null = dataset.seq_len)
    warmup: int = 1  # untimed forward passes before timing
    iters: int = 20  # at most this many timed forward passes per batch size
    min_iters: int = 3  # at least this many; then timing stops once the estimate is precise enough:
    precision: float = 0.05  # ... the 95% interval of the mean latency within +-5% of it,
    timing_budget_s: float = 3.0  # ... or this many seconds of timed passes per batch size
    # per-module forward time (hooks), batch 1
    layer_timing: bool = True  # time every module's forward (hooks, batch 1)
    layer_timing_iters: int = 2  # forward passes averaged for the module times
    top_layers: int = 15  # slowest modules listed in the table and plot
    # thresholds of the deployment insights (insights.md)
    realtime_latency_ms: float = 100.0  # p95 latency of one sequence (or example) at batch 1 below this is "real-time"
    edge_max_weight_mb: float = 512.0  # weights that fit an "edge" device
    server_min_tokens_per_s: float = 1000.0  # throughput a "server" deployment of a language model needs
    server_min_examples_per_s: float = 100.0  # throughput (examples/s) a "server" deployment of a classifier needs
    tail_ratio: float = 1.5  # p99/p50 latency above this is called jittery
    collapse_share: float = (
        COLLAPSE_SHARE  # classifiers: one class predicted for this share of the test examples is a collapse
    )
    uniform_perplexity_share: float = (
        0.5  # language models: perplexity at this share of the vocabulary is a uniform guess
    )
    # text and speech tasks (masked LMs, seq2seq, text classifiers, speech recognisers)
    generate_examples: int = 16  # greedy outputs (seq2seq, Whisper) or transcripts (CTC) scored; 0 = none
    max_new_tokens: int = 48  # tokens a greedy output may run to
    kl_examples: int = 32  # examples whose scored positions keep the unquantized log-probabilities (exact KL)
    bootstrap: int = 200  # resamples for the standard errors of chrF and BLEU
    shown_outputs: int = 8  # greedy outputs listed in the report (all are in the JSON)
    # detectors, segmenters and vision backbones
    max_detections: int = 100  # a detector's highest-scoring boxes kept per image (COCO's limit)
    detection_bootstrap: int = 50  # resamples of images for the standard error of mAP (a COCO evaluation each)
    agreement_score: float = 0.5  # the unquantized detections at least this confident are the agreement's truth
    knn_k: int = 5  # neighbours voting in a backbone's k-NN accuracy
    score_outputs: list[str] = field(
        default_factory=list
    )  # a generic model's outputs that score classes (top-1 agreement), besides those named like logits or scores

    def validate(self) -> None:
        self.require_choice("protocol", PROTOCOLS)
        self.require_choice("prefix_token", ["none", "bos", "eos"])
        self.require_positive("batch_size", "top_k", "speed_batch_sizes", "iters", "layer_timing_iters", "top_layers")
        self.require_positive("min_iters", "precision", "timing_budget_s")
        self.require_positive("stride", "speed_seq_len", allow_none=True)
        self.require_non_negative("warmup", "generate_examples", "kl_examples", "kl_windows", "shown_outputs")
        self.require_positive("max_new_tokens", "bootstrap", "max_detections", "detection_bootstrap", "knn_k")
        if not 0 <= self.agreement_score <= 1:
            raise ConfigError("agreement_score", f"must be a score in [0, 1], got {self.agreement_score}")
        for key in ("collapse_share", "uniform_perplexity_share"):
            if not 0 < getattr(self, key) <= 1:
                raise ConfigError(key, f"must be a share in (0, 1], got {getattr(self, key)}")
        self.require_positive(
            "realtime_latency_ms",
            "edge_max_weight_mb",
            "server_min_tokens_per_s",
            "server_min_examples_per_s",
            "tail_ratio",
        )

    def preflight(self, subject) -> None:
        kind = kind_of(subject)
        if isinstance(kind, Classifier):
            self._preflight_classifier(subject)
            return
        if isinstance(kind, Generic):
            self._refuse_lm_keys(subject, "a generic model (named example inputs)")
            return
        if isinstance(kind, (WindowsKind, LabelledImagesKind)):
            self._refuse_lm_keys(subject, f"a {kind.name} model (its own examples)")
            return
        data = subject.data
        if data is not None and self.stride is not None and self.stride > data.seq_len:
            raise ConfigError("stride", f"must not exceed dataset.seq_len ({data.seq_len})")
        which = "bos" if self.protocol == "lm_eval_rolling" and self.prefix_token == "none" else self.prefix_token
        if which != "none" and subject.batches is None:
            prefix_token_id(subject.tokenizer, which)

    def _preflight_classifier(self, subject) -> None:
        data = subject.data
        if data is None or not all(hasattr(data, k) for k in ("x_test", "y_test", "n_classes")):
            where = "a DataLoader was given" if subject.batches is not None else "none was loaded"
            raise ConfigError(
                "analyzer.performance",
                f"measures a classifier on the test split of a classification dataset ({where}); "
                "use e.g. dataset=digits",
            )
        n = int(data.y_test.shape[0])
        if n == 0 or int(data.x_test.shape[0]) != n:
            raise ConfigError(
                "analyzer.performance",
                f"dataset {data.name}: the test split needs examples with one label each "
                f"(x_test has {int(data.x_test.shape[0])}, y_test {n})",
            )
        self._refuse_lm_keys(subject, "a classifier")

    def _refuse_lm_keys(self, subject, what: str) -> None:
        for key, unused in LM_ONLY.items():
            if getattr(self, key) != unused:
                raise ConfigError(
                    key,
                    f"applies to language models (token windows) only; {subject.info.name} is {what}: "
                    f"leave it at {'null' if unused is None else unused}",
                )

    def headline(self, result: Result) -> dict[str, float]:
        """The speed metrics per batch size (``bs4_...``) are in the speed table already."""
        return {k: v for k, v in super().headline(result).items() if not k.startswith("bs")}


def prefix_token_id(tokenizer, which: str) -> int | None:
    """The token put before the text (``prefix_token``: bos, eos or none) so its first token is scored too."""
    if which == "none":
        return None
    bos, eos = getattr(tokenizer, "bos_token_id", None), getattr(tokenizer, "eos_token_id", None)
    token = (bos if bos is not None else eos) if which == "bos" else eos
    if token is None:
        raise ConfigError("analyzer.performance.prefix_token", f"the tokenizer has no {which} token; use none")
    return int(token)
