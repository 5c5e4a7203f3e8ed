"""What differs between a language model and a classifier in the bitwidth analyzer: the reference
and its quality metric (perplexity, or accuracy), the budget of the recommendation, the units of
layer sensitivity and the blocks of the progressive plan. ``run`` is written once against these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from modelxray.analyzers.bitwidth.blocks import OTHER, Block, find_blocks, module_rules
from modelxray.kinds.base import choose, plurals
from modelxray.kinds.causal_lm import CausalLM
from modelxray.kinds.classifier import Classifier
from modelxray.kinds.labelled_images import LabelledImagesKind
from modelxray.kinds.table import kind_of
from modelxray.kinds.windows import WindowsKind
from modelxray.measure.classifier_reference import ClassifierReference, is_zero_shot
from modelxray.measure.reference import Reference
from modelxray.metrics.distinguish import Difference
from modelxray.metrics.lm import ratio_se
from modelxray.metrics.windows import lm_eval_windows
from modelxray.quant.targets import Target, num_blocks

# an evaluation's per-window sums (windows, 3: NLL, tokens, top-1 hits), kept out of tables and
# metrics, so that two plans scored on the same windows can be compared paired by window
WINDOWS = "_windows"


@dataclass
class Unit:
    """What one sensitivity probe quantizes: its label, its table columns and its plan rules."""

    label: str
    fields: dict
    rules: Callable[[int], list[dict]]  # bits -> plan rules quantizing exactly this unit


class LanguageModelMode:
    """Token windows: perplexity (lower is better), a budget of relative perplexity increase, units
    of one block's attention or MLP ranked by loss increase."""

    task = CausalLM.task
    key = "perplexity"
    change_key = "ppl_increase"
    quality = "perplexity"
    higher_is_better = False
    row_keys = (
        *("perplexity", "loss", "loss_se", "delta_loss", "delta_loss_se", "top1_agree", "top1_agree_se"),
        *("kl", "kl_se", "kl_p90", "kl_p99", "kl_p999", "kl_max", "rms_dp"),
    )
    reference_keys = ("loss", "perplexity", "tokens_scored")
    rec_keys = ("perplexity", "delta_loss", "delta_loss_se", "kl", "top1_agree")
    rank_by = ("loss_increase",)
    unit_noun = "block components"
    sensitivity_view = "components"  # how insights.md ranks the sensitivity units: by component of each block
    search_on_probe = True  # the recommendation's search: windows are costly, a few estimate the budget

    def __init__(self, cfg, subject, work, targets: list[Target], progress: bool):
        self.windows = lm_eval_windows(subject.data, subject.batches, cfg.max_windows)
        self.cfg, self.targets = cfg, targets
        given = subject.reference_baselines.get(cfg.name)  # reference=: another model is the baseline
        if subject.stream is not None:
            self.ref = None  # the float path of the first read of the streamed model (``streamed``)
        else:
            self.ref = given or Reference(
                work, self.windows, cfg.batch_size, cfg.kl_windows, progress, "bitwidth: reference"
            )
        self.probe = max(1, -(-cfg.sensitivity_windows // cfg.batch_size))  # batches per probe
        self.budget = cfg.budget_ppl_increase

    @property
    def metrics(self) -> dict:
        return self.ref.metrics

    def evaluate(self, model, probe: bool, progress: bool, desc: str) -> dict:
        """The reference's comparison (``Reference.evaluate``), plus each window's sums under
        ``WINDOWS`` for paired comparisons between plans."""
        return self.evaluation(self.ref.compare(model, self.probe if probe else None, progress, desc))

    @staticmethod
    def evaluation(comp) -> dict:
        """A comparison's figures, with each window's sums under ``WINDOWS``."""
        return {**comp.result(), WINDOWS: comp.score.per_window()}

    def probe_reference(self) -> dict:
        return self.ref.metrics_of(self.probe)

    def change(self, m: dict, ref: dict) -> float:
        """Relative perplexity increase over the reference (the budgeted quantity)."""
        return m["perplexity"] / ref["perplexity"] - 1

    def scored(self) -> dict:
        """What every configuration was scored on (``insights.scored_text`` says it: ``8,160 tokens``)."""
        return {"count": int(self.metrics["tokens_scored"]), "unit": "tokens"}

    def facts(self) -> dict:
        """What the sentences of insights.md need of this mode, kept in the Result's data (JSON)."""
        return {
            "scored": self.scored(),
            "unit_noun": self.unit_noun,
            "change_key": self.change_key,
            "sensitivity_view": self.sensitivity_view,
        }

    @staticmethod
    def paired_difference(a: dict, b: dict) -> Difference | None:
        """Loss of evaluation ``a`` minus that of ``b`` (nats per token) with its standard error from
        the per-window differences (windows as units); None unless both kept their windows and
        scored the same tokens."""
        wa, wb = a.get(WINDOWS), b.get(WINDOWS)
        if wa is None or wb is None or wa.shape != wb.shape or not torch.equal(wa[:, 1], wb[:, 1]):
            return None
        diff = wa[:, 0] - wb[:, 0]
        return Difference(float(diff.sum() / wa[:, 1].sum()), ratio_se(diff, wa[:, 1]), paired=True)

    def pareto_value(self, row: dict) -> float:
        return row["perplexity"]

    def units(self) -> list[Unit]:
        kinds = self.cfg.targets
        pairs = sorted(
            {
                (t.block, t.component)
                for t in self.targets
                if t.kind in kinds and t.block is not None and t.component in ("attention", "mlp")
            }
        )
        return [
            Unit(
                f"{b}.{c}",
                {"block": b, "component": c},
                lambda bits, b=b, c=c: [{"blocks": [b], "component": c, "bits": bits}],
            )
            for b, c in pairs
        ]

    def sensitivity_row(self, unit: Unit, m: dict, base: dict, params: int) -> dict:
        return {
            **unit.fields,
            "bits": self.cfg.sensitivity_bits,
            "loss_increase": m["loss"] - base["loss"],
            "kl": m["kl"],
            "params": params,
        }

    def progressive_rules(self) -> tuple[list[dict] | None, str]:
        """Rules of the progressive plan, or None and why it does not apply."""
        cfg, n = self.cfg, num_blocks(self.targets)
        if n <= 2 * cfg.progressive_edge:
            return (
                None,
                f"{n} blocks, progressive_edge {cfg.progressive_edge} needs more than {2 * cfg.progressive_edge}",
            )
        edge = list(range(cfg.progressive_edge)) + [-(i + 1) for i in range(cfg.progressive_edge)]
        return [{"blocks": edge, "bits": cfg.high_bits}], ""


class ClassifierMode:
    """The test split: accuracy (higher is better; zero-shot accuracy for a dual encoder), a budget of
    absolute accuracy drop, units of one block of a tower ranked by KL(unquantized || quantized)."""

    task = Classifier.task
    key = "accuracy"
    change_key = "accuracy_drop"
    higher_is_better = True
    row_keys = ("accuracy", "accuracy_ci_low", "accuracy_ci_high", "loss", "top1_agree", "kl")
    reference_keys = ("loss", "accuracy", "accuracy_ci_low", "accuracy_ci_high", "examples_scored")
    rec_keys = ("accuracy", "accuracy_ci_low", "accuracy_ci_high", "kl", "top1_agree")
    rank_by = ("kl", "loss_increase")
    unit_noun = "blocks"
    sensitivity_view = "classifier"  # blocks of each tower, by KL and loss
    search_on_probe = False  # accuracy moves in steps of 1/examples: search on the examples it is confirmed on

    def __init__(self, cfg, subject, work, targets: list[Target], progress: bool):
        self.cfg = cfg
        self.ref = ClassifierReference(
            work, subject.data, cfg.eval_examples, cfg.eval_batch_size, progress, "bitwidth: reference"
        )
        self.metrics = self.ref.metrics
        self.quality = "zero-shot accuracy" if is_zero_shot(work) else "accuracy"
        self.probe = cfg.sensitivity_examples
        self.budget = cfg.budget_accuracy_drop
        self.blocks: list[Block] = find_blocks(work, [t for t in targets if t.kind in cfg.targets])

    def evaluate(self, model, probe: bool, progress: bool, desc: str) -> dict:
        return self.ref.evaluate(model, progress, desc, self.probe if probe else None)

    def probe_reference(self) -> dict:
        return self.ref.metrics_of(self.probe)

    def change(self, m: dict, ref: dict) -> float:
        """Accuracy lost against the reference, absolute (0.01 = one point; the budgeted quantity)."""
        return ref["accuracy"] - m["accuracy"]

    def scored(self) -> dict:
        return {"count": self.ref.n, "unit": "test examples"}

    facts = LanguageModelMode.facts

    @staticmethod
    def paired_difference(a: dict, b: dict) -> Difference | None:
        """None: a classifier's evaluation keeps no per-example losses to pair two plans by."""
        return None

    def pareto_value(self, row: dict) -> float:
        return -row["accuracy"]

    def units(self) -> list[Unit]:
        return [
            Unit(
                b.label,
                {
                    "block": b.label,
                    **({"tower": b.tower} if b.tower else {}),
                    "type": b.type,
                    "modules": len(b.modules),
                },
                lambda bits, b=b: module_rules(b, bits),
            )
            for b in self.blocks
        ]

    def sensitivity_row(self, unit: Unit, m: dict, base: dict, params: int) -> dict:
        return {
            **unit.fields,
            "bits": self.cfg.sensitivity_bits,
            "kl": m["kl"],
            "top1_agree": m["top1_agree"],
            "accuracy_drop": base["accuracy"] - m["accuracy"],
            "loss_increase": m["loss"] - base["loss"],
            "params": params,
        }

    def progressive_rules(self) -> tuple[list[dict] | None, str]:
        """``high_bits`` in the first and last ``progressive_edge`` blocks of every block list deep
        enough (each tower of a dual encoder counts its own), or None and why it does not apply."""
        edge, lists = self.cfg.progressive_edge, {}
        for b in self.blocks:
            if b.type != OTHER:
                lists.setdefault(b.prefix.rsplit(".", 1)[0] if "." in b.prefix else "", []).append(b)
        rules = []
        for blocks in lists.values():
            if len(blocks) > 2 * edge:
                for b in blocks[:edge] + blocks[-edge:]:
                    rules.extend(module_rules(b, self.cfg.high_bits))
        if not rules:
            depth = max((len(v) for v in lists.values()), default=0)
            return None, f"{depth} blocks, progressive_edge {edge} needs more than {2 * edge}"
        return rules, ""


class TaskMode(LanguageModelMode):
    """A text or speech task (masked LM, seq2seq, text classifier, Whisper): scored like a language
    model at its scored positions (perplexity, paired loss changes), with units and a progressive plan
    found by structure as a classifier's are, so each stack (an encoder's and a decoder's layers)
    has its own blocks."""

    unit_noun = "blocks"
    sensitivity_view = "blocks"  # blocks of each stack, by loss

    def __init__(self, cfg, subject, work, targets: list[Target], progress: bool):
        super().__init__(cfg, subject, work, targets, progress)
        self.task = subject.task
        self.blocks: list[Block] = find_blocks(work, [t for t in targets if t.kind in cfg.targets])

    units = ClassifierMode.units
    progressive_rules = ClassifierMode.progressive_rules


class VisionMode(ClassifierMode):
    """A detector, segmenter or backbone on its images: ``accuracy`` is the task's quality (mAP@.5,
    mean IoU, k-NN accuracy; higher is better, the budget an absolute drop) and ``top1_agree`` its
    agreement with the unquantized outputs; units of one block ranked by disagreement."""

    row_keys = ("accuracy", "top1_agree")
    reference_keys = ("accuracy",)
    rec_keys = ("accuracy", "top1_agree")
    rank_by = ("disagreement", "accuracy_drop")
    sensitivity_view = "agreement"  # blocks, by disagreement with the unquantized outputs

    def __init__(self, cfg, subject, work, targets: list[Target], progress: bool):
        import dataclasses

        from modelxray.perturb.vision_task_harness import VisionTaskHarness

        self.cfg, self.task = cfg, subject.task
        n = min(cfg.eval_examples, subject.data.n_examples)
        self.ref = VisionTaskHarness(dataclasses.replace(subject, model=work), n, cfg.eval_batch_size, 0, 5, "mid")
        self.ref.n = n
        self.metrics = {"accuracy": self.ref.clean[self.ref.quality], "top1_agree": 1.0}
        self.quality = self.ref.quality_name
        self.probe = None
        self.budget = cfg.budget_accuracy_drop
        self.blocks = find_blocks(work, [t for t in targets if t.kind in cfg.targets])

    def evaluate(self, model, probe: bool, progress: bool, desc: str) -> dict:
        return self.ref.evaluate_as_classifier(model, desc)

    def probe_reference(self) -> dict:
        return self.metrics

    def scored(self) -> dict:
        return {"count": self.ref.n, "unit": "images"}

    def sensitivity_row(self, unit: Unit, m: dict, base: dict, params: int) -> dict:
        return {
            **unit.fields,
            "bits": self.cfg.sensitivity_bits,
            "top1_agree": m["top1_agree"],
            "disagreement": 1.0 - m["top1_agree"],
            "accuracy_drop": base["accuracy"] - m["accuracy"],
            "params": params,
        }


# the mode of each family of kinds (the most specific class of a kind wins)
MODES: dict[type, type] = {
    LabelledImagesKind: VisionMode,
    Classifier: ClassifierMode,
    CausalLM: LanguageModelMode,
    WindowsKind: TaskMode,
}


def mode_for(cfg, subject, work, targets: list[Target], progress: bool):
    cls = choose(kind_of(subject), MODES, "analyzer.bitwidth", f"analyzes {plurals(tuple(MODES))}")
    return cls(cfg, subject, work, targets, progress)
