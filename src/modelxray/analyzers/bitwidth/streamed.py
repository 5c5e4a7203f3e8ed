"""The bitwidth analyzer on a model streamed block by block (``runtime.offload=blocks``): its plans
are paths of a stream beside the float model, so the passes are planned to read the model as few
times as the analysis allows. The first read scores every configuration on all windows and every
sensitivity probe on the first few (each probe shares the float path's hidden states up to the block
it quantizes); the recommendation's binary search takes ``stream_search_levels`` levels per read, and
its confirmation one more. The figures are those of the in-memory analyzer, plan for plan."""

from __future__ import annotations

from modelxray.analyzers.bitwidth.modes import mode_for
from modelxray.analyzers.bitwidth.plans import config_rows, size_stats
from modelxray.core.result import RunContext
from modelxray.measure.streamed_comparison import score_variants
from modelxray.quant.streamed import BlockQuantization
from modelxray.quant.targets import find_targets
from modelxray.quant.weight import WeightQuantizer


class StreamedSession:
    """What ``run._Session`` is for a model in memory, for a streamed one: ``evaluate_many`` scores
    several plans in one read of the model; an evaluation asked for again is not read again."""

    def __init__(self, cfg, subject, ctx: RunContext):
        self.cfg, self.ctx = cfg, ctx
        self.stream = subject.stream
        self.work = subject.model  # on the meta device: plans and targets by name and shape
        self.targets = find_targets(self.work)
        self.mode = mode_for(cfg, subject, self.work, self.targets, ctx.progress)
        self.search_levels = cfg.stream_search_levels
        self.originals = None
        self._done: dict[tuple[str, bool], tuple[dict, dict]] = {}
        self.mark = self.stream.stats.mark()

    def __enter__(self) -> StreamedSession:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def evaluate(self, quantizer: WeightQuantizer, probe: bool = False, desc: str = "") -> tuple[dict, dict]:
        return self.evaluate_many([(quantizer, probe)], desc)[0]

    def evaluate_many(self, plans: list[tuple[WeightQuantizer, bool]], desc: str = "") -> list[tuple[dict, dict]]:
        """Each ``(quantizer, probe)`` scored against the float path (on the probe's first batches
        when ``probe``) and its size statistics, those not yet evaluated in one read of the model."""
        todo = list(dict.fromkeys(key for q, p in plans if (key := (repr(q), p)) not in self._done))
        if todo or self.mode.ref is None:  # the first read sets the reference, also with no plan to score
            by_key = {(repr(q), p): q for q, p in plans}
            paths = [BlockQuantization(by_key[key], self.work) for key in todo]
            full = self.mode.ref is None  # the first read: the float path on every window is the reference
            scores = score_variants(
                self.stream,
                self.mode.windows,
                self.cfg.batch_size,
                self.cfg.kl_windows,
                paths,
                limits=[self.mode.probe if probe else None for _, probe in todo],
                full=full,
                progress=self.ctx.progress,
                desc=f"bitwidth: streaming blocks{f' ({desc})' if desc else ''}",
            )
            if full:
                self.mode.ref = scores.reference
            for key, path, comparison in zip(todo, paths, scores.comparisons, strict=True):
                self._done[key] = (self.mode.evaluation(comparison), self._stats(path))
        return [self._done[(repr(q), p)] for q, p in plans]

    def _stats(self, path: BlockQuantization) -> dict:
        order = {t.name: i for i, t in enumerate(path.targets)}
        rows = sorted(path.rows.values(), key=lambda r: order.get(r["module"], len(order)))
        return {**size_stats(rows, self.work), "quantize_seconds": path.seconds}

    def rows(self, configs: dict[str, WeightQuantizer]) -> tuple[list[dict], dict]:
        return config_rows(self, configs)

    def streaming(self) -> dict:
        """What the analysis cost in reads of the model."""
        return {
            **self.stream.stats.since(self.mark, self.stream.model_bytes()),
            "plans": len(self._done),
            "search_levels": self.search_levels,
        }
