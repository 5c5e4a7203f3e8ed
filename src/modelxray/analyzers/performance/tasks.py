"""The performance analyzer on text and speech tasks (masked LMs, seq2seq models, text classifiers,
speech recognisers): the task's quality on its examples, its agreement with the unquantized model
when the run quantized it, and speed per batch of examples.

Quality by task, each with its uncertainty:
- masked LM: loss, perplexity and accuracy at the masked tokens (standard errors, windows as units);
- seq2seq and Whisper: teacher-forced loss, perplexity and accuracy of the target tokens, and the
  greedy outputs' chrF and BLEU (seq2seq) or word and character error rates (speech);
- a CTC speech model: word and character error rates of its greedy transcripts;
- text classifiers: accuracy (a 95% Wilson interval for one label per text; a standard error with
  texts as units for per-token labels) and loss.
Agreement: top-1 agreement, KL and the paired loss change at the scored positions (``Reference``),
and the outputs against the unquantized outputs (chrF / WER / exact match; a CTC model's frames)."""

from __future__ import annotations

import dataclasses
import time

import torch

from modelxray.core.result import Result, RunContext
from modelxray.kinds.image_text_to_text import ImageTextToText
from modelxray.kinds.speech import SpeechRecognizer
from modelxray.kinds.speech_ctc import SpeechCTC
from modelxray.kinds.table import kind_of
from modelxray.measure.scoring import model_device, score_windows
from modelxray.measure.speed import StopRule, time_forward
from modelxray.measure.task_outputs import answers, ctc_outputs, example_batch, generations
from modelxray.metrics.lm import divergence_summary, ratio_se
from modelxray.metrics.measurements import Latency, Quality, Speed
from modelxray.metrics.measurements.quality import wilson_interval
from modelxray.metrics.text_quality import error_rate, exact_match, generation_scores, normalize

AGREEMENT_KEYS = ("top1_agree", "top1_agree_se", "kl", "kl_se", "kl_p99", "delta_loss", "delta_loss_se")


def quality(cfg, subject, ctx: RunContext, result: Result) -> None:
    data, kind = subject.data, kind_of(subject)
    result.data["quality"] = {"protocol_description": data.description, "examples": data.n_examples}
    result.metrics["examples"] = float(data.n_examples)
    if data.windows:
        _scored(cfg, subject, kind, ctx, result)
    if isinstance(kind, SpeechCTC):
        _ctc(cfg, subject, ctx, result)
    elif isinstance(kind, ImageTextToText):
        _answered(cfg, subject, ctx, result)
    elif data.meta.get("prompt"):
        _generated(cfg, subject, ctx, result, speech=isinstance(kind, SpeechRecognizer))


def _one_label(result: Result, raw: dict, kind) -> None:
    """A text classifier: accuracy with its Wilson interval, loss, examples_scored."""
    q = Quality.of_classifier(raw["loss"], raw["tokens_scored"], {1: raw["accuracy"]})
    result.record("quality", q)
    result.metrics["accuracy_se"] = raw["accuracy_se"]


def _per_token(result: Result, raw: dict, kind) -> None:
    """A token classifier's labelled tokens: no perplexity, texts as the units."""
    for k in ("loss", "loss_se", "accuracy", "accuracy_se", "tokens_scored", "windows_scored"):
        result.metrics[k] = raw[k]


def _perplexity(result: Result, raw: dict, kind) -> None:
    """Loss, perplexity and accuracy, with errors, named for what the perplexity is of."""
    q = Quality.from_dict(raw)
    result.record("quality", dataclasses.replace(q, name=kind.perplexity_name))


# how the scores at the scored positions become the quality, by what the kind is scored by
QUALITY = {"perplexity": _perplexity, "label": _one_label, "token_labels": _per_token}


def _scored(cfg, subject, kind, ctx: RunContext, result: Result) -> None:
    """Loss and accuracy at the scored positions; agreement with the unquantized model's."""
    data = subject.data
    ks = sorted(set(cfg.top_k) | {1}) if kind.quality_figure() == "perplexity" else [1]  # labels: accuracy at k = 1
    comp = None
    if subject.stream is not None:  # block by block from disk: the float and quantized paths together
        from modelxray.analyzers.performance.streamed import stream_scores

        score, seconds, comp, _ = stream_scores(cfg, subject, data.windows, ctx.progress, ks, cfg.kl_examples)
    else:
        score, seconds = score_windows(
            subject.model, data.windows, cfg.batch_size, ks, ctx.progress, "performance: scoring"
        )
    raw = score.result()
    QUALITY[kind.scored_by](result, raw, kind)
    if subject.stream is None:  # a streamed model's pass times the disk, not the model
        result.metrics["eval_examples_per_s"] = len(data.windows) / seconds
    result.data["quality"].update({k: v for k, v in raw.items()})
    ref = getattr(subject.reference, "windows", None)
    if ref is not None and comp is None:
        comp = ref.compare(subject.model, progress=ctx.progress, desc="performance: agreement")
    if comp is not None:
        agreement = {k: v for k, v in comp.result().items() if k in AGREEMENT_KEYS}
        result.metrics.update(agreement)
        result.data["agreement"] = agreement


def _generated(cfg, subject, ctx: RunContext, result: Result, speech: bool) -> None:
    """Greedy outputs of the first ``generate_examples``: chrF/BLEU (seq2seq) or WER/CER (speech)
    against the references, and against the unquantized model's outputs."""
    data = subject.data
    n = min(cfg.generate_examples, data.n_examples)
    if n == 0:
        return
    texts = generations(subject.model, subject, n, cfg.batch_size, cfg.max_new_tokens, ctx.progress)
    refs = data.meta["references"][:n]
    scores = _text_scores(refs, texts, speech, cfg.bootstrap, "")
    ref_texts = getattr(subject.reference, "texts", None)
    if ref_texts is not None:
        scores.update(_text_scores(ref_texts[:n], texts, speech, cfg.bootstrap, "unquantized_"))
    result.metrics.update(scores)
    result.metrics["generated_examples"] = float(n)
    sources = data.meta.get("sources") or [""] * n
    rows = [
        {"source": s[:120], "reference": r[:120], "output": t[:120], **({"unquantized": u[:120]} if ref_texts else {})}
        for s, r, t, u in zip(sources, refs, texts, ref_texts or [""] * n)
    ]
    result.tables["outputs"] = rows[: cfg.shown_outputs]
    result.data["outputs"] = rows


def _answered(cfg, subject, ctx: RunContext, result: Result) -> None:
    """Greedy answers of a generative vision-language model to the first ``generate_examples``
    questions: exact match with the reference answers (Wilson interval), and with the unquantized
    model's answers."""
    data = subject.data
    n = min(cfg.generate_examples, data.n_examples)
    if n == 0:
        return
    texts = answers(subject.model, subject, n, cfg.max_new_tokens, ctx.progress)
    refs = data.meta["references"][:n]
    result.metrics.update(_exact(refs, texts, ""))
    ref_texts = getattr(subject.reference, "texts", None)
    if ref_texts is not None:
        result.metrics.update(_exact(ref_texts[:n], texts, "unquantized_"))
    result.metrics["generated_examples"] = float(n)
    rows = [
        {"question": q[-60:], "reference": r, "output": t[:60], **({"unquantized": u[:60]} if ref_texts else {})}
        for q, r, t, u in zip(data.meta["prompts"], refs, texts, ref_texts or [""] * n)
    ]
    result.tables["outputs"] = rows[: cfg.shown_outputs]
    result.data["outputs"] = rows


def _exact(refs: list[str], texts: list[str], prefix: str) -> dict[str, float]:
    """The share of answers equal to the references (after ``normalize``), with its Wilson interval."""
    share = exact_match(refs, texts)
    low, high = wilson_interval(share * len(refs), len(refs))
    return {f"{prefix}exact_match": share, f"{prefix}exact_match_ci_low": low, f"{prefix}exact_match_ci_high": high}


def _text_scores(refs: list[str], texts: list[str], speech: bool, bootstrap: int, prefix: str) -> dict:
    """Error rates (speech) or chrF/BLEU (text) of ``texts`` against ``refs``, keys ``prefix``ed, and
    the share of empty outputs; against the unquantized model, the share of identical outputs with its
    Wilson interval. chrF and BLEU leave out the pairs where both texts are empty: two empty outputs
    agree (they count in the exact match), and a character n-gram score has nothing to compare there.
    When every pair is such, chrF and BLEU are not logged (``both_empty`` says how many)."""
    both_empty = sum(not normalize(r) and not normalize(t) for r, t in zip(refs, texts))
    if speech:
        out = {**error_rate(refs, texts, "word"), **error_rate(refs, texts, "char")}
    else:
        kept = [(r, t) for r, t in zip(refs, texts) if normalize(r) or normalize(t)]
        out = generation_scores([r for r, _ in kept], [t for _, t in kept], bootstrap) if kept else {}
    if prefix:  # against the unquantized model's outputs
        out.update({k.removeprefix(prefix): v for k, v in _exact(refs, texts, prefix).items()})
        out["both_empty"] = float(both_empty)
    else:
        out["empty_output_share"] = sum(not normalize(t) for t in texts) / max(len(texts), 1)
    return {f"{prefix}{k}": v for k, v in out.items()}


def _ctc(cfg, subject, ctx: RunContext, result: Result) -> None:
    """A CTC model: WER/CER of its greedy transcripts; against the unquantized model, the transcripts'
    WER and the frames' KL and top-1 agreement (utterances as units)."""
    data = subject.data
    n = min(cfg.generate_examples, data.n_examples)
    start = time.perf_counter()
    logits, texts = ctc_outputs(subject.model, subject, n, cfg.batch_size)
    result.metrics["eval_examples_per_s"] = n / (time.perf_counter() - start)
    refs = data.meta["references"][:n]
    result.metrics.update(_text_scores(refs, texts, True, cfg.bootstrap, ""))
    ref = subject.reference
    rows = [{"reference": r[:120], "output": t[:120]} for r, t in zip(refs, texts)]
    if ref is not None and ref.frame_logprobs is not None:
        result.metrics.update(_text_scores(ref.texts, texts, True, cfg.bootstrap, "unquantized_"))
        result.metrics.update(frame_agreement(ref.frame_logprobs, logits))
        rows = [{**row, "unquantized": u[:120]} for row, u in zip(rows, ref.texts)]
    result.tables["outputs"] = rows[: cfg.shown_outputs]
    result.data["outputs"] = rows


def frame_agreement(ref_logprobs: list[torch.Tensor], logits: list[torch.Tensor]) -> dict[str, float]:
    """KL(unquantized || model) per frame and the share of frames with the same best token, over
    every frame of every utterance, with standard errors (utterances as units)."""
    kls, agree, rows = [], [], []
    for b, (logp, x) in enumerate(zip(ref_logprobs, logits)):
        logq = torch.log_softmax(x.float(), -1)
        kl = (logp.exp() * (logp - logq)).sum(-1).clamp_min(0.0)  # (B, frames)
        kls.append(kl.double().reshape(-1))
        agree.append((logp.argmax(-1) == logq.argmax(-1)).double().reshape(-1))
        rows.append((torch.arange(kl.shape[0], device=kl.device)[:, None].expand_as(kl) + 1000 * b).reshape(-1))
    kl, same, row = torch.cat(kls), torch.cat(agree), torch.cat(rows)
    units = torch.unique(row, return_inverse=True)[1]
    m = int(units.max()) + 1
    sums = torch.zeros(m, dtype=torch.float64, device=same.device).index_add_(0, units, same)
    counts = torch.zeros(m, dtype=torch.float64, device=same.device).index_add_(0, units, torch.ones_like(same))
    out = {"frame_top1_agree": float(same.mean()), "frame_top1_agree_se": ratio_se(sums, counts)}
    summary = divergence_summary(kl, torch.zeros_like(kl), units)
    out.update({"frame_kl": float(kl.mean()), "frame_kl_se": summary.get("kl_se", float("nan"))})
    return out


def speed(cfg, subject, ctx: RunContext, result: Result) -> None:
    """Forward latency at each of ``speed_batch_sizes`` examples (scored windows, or audio)."""
    model = subject.model
    device = model_device(model)
    speeds = []
    for bs in cfg.speed_batch_sizes:
        batch = example_batch(subject, bs).to(device)
        times = time_forward(
            model, batch, cfg.warmup, StopRule.of(cfg), ctx.progress, desc=f"performance: latency bs={bs}"
        )
        shape = tuple(next(iter(dict.values(batch))).shape[1:])
        sp = Speed.of_examples(bs, shape, Latency.from_values(times))
        result.record(f"speed/bs{bs}", sp)
        speeds.append(sp)
    result.tables["speed"] = [s.row() for s in speeds]
    result.data["speed"] = [s.to_dict() for s in speeds]


def layer_input(subject) -> tuple:
    """One example (batch 1) for per-module timing, and how to describe it: the trial forward's."""
    batch = kind_of(subject).trial_inputs(subject)
    return batch, {"inputs": {n: list(t.shape) for n, t in dict.items(batch)}}
