"""The performance analyzer on a classifier (a ``Classifier`` kind): quality on the dataset's test
split and speed per batch of test inputs.

The model is called as ``model(x)`` on a float batch shaped ``(N, *input_shape)`` (digits: (N, 64);
an image model: (N, C, H, W)) and returns logits ``(N, n_classes)`` (a tensor, or an output with
``.logits``). Inputs take the dtype of the model's floating-point weights, so a cast model (fp16,
bf16) gets inputs it can multiply."""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from modelxray.core.progress import bar
from modelxray.core.result import Result, RunContext
from modelxray.measure.classifier_reference import check_logits, example_inputs, input_dtype
from modelxray.measure.scoring import logits_of, model_device
from modelxray.measure.speed import StopRule, time_forward
from modelxray.metrics.degenerate import classifier_signs
from modelxray.metrics.measurements import Latency, Quality, Speed, wilson_interval


def top_ks(cfg, n_classes: int) -> list[int]:
    """Top-1 always, and every configured k below the number of classes (k >= n_classes is 1.0 by
    construction, so it is not reported)."""
    return sorted({1} | {int(k) for k in cfg.top_k if int(k) < n_classes})


def quality(cfg, subject, ctx: RunContext, result: Result) -> None:
    """Mean cross-entropy, top-k accuracy and its 95% Wilson interval over the whole test split."""
    data, model = subject.data, subject.model
    device, dtype = model_device(model), input_dtype(model)
    n = int(data.y_test.shape[0])
    ks = top_ks(cfg, data.n_classes)
    nll, hits, kept = 0.0, dict.fromkeys(ks, 0), []
    start = time.perf_counter()
    with (
        torch.inference_mode(),
        bar(total=n, desc="performance: accuracy", unit="example", enabled=ctx.progress) as pbar,
    ):
        for i in range(0, n, cfg.batch_size):
            x = data.x_test[i : i + cfg.batch_size].to(device=device, dtype=dtype)
            y = data.y_test[i : i + cfg.batch_size].to(device)
            logits = logits_of(model(x)).float()
            check_logits(logits, y, data)
            nll += float(F.cross_entropy(logits, y, reduction="sum"))
            ranked = logits.topk(min(max(ks), logits.shape[1]), dim=-1).indices == y[:, None]  # (B, kmax)
            for k in ks:
                hits[k] += int(ranked[:, :k].any(dim=-1).sum())
            kept.append(logits.cpu())
            pbar.update(int(y.shape[0]))
    seconds = time.perf_counter() - start
    q = Quality.of_classifier(loss=nll / n, n_scored=float(n), accuracy_at={k: hits[k] / n for k in ks})
    result.record("quality", q)  # loss, examples_scored, accuracy, accuracy_ci_low/high, top<k>_accuracy
    result.metrics["eval_examples_per_s"] = n / seconds
    desc = f"the {n:,} examples of the {data.name} test split ({data.n_classes} classes)"
    result.data["quality"] = {
        **q.to_dict(),
        "eval_examples_per_s": n / seconds,
        "protocol_description": desc,
        "split": "test",
        "n_classes": int(data.n_classes),
        "top_k": ks,
        "correct": hits[1],
    }
    signs = classifier_signs(torch.cat(kept), data.y_test, cfg.collapse_share)
    if signs:  # leads the insights: every other figure is about a model that does not work
        result.data["degenerate"] = signs
    if subject.reference is not None:
        vs = against_reference(subject.reference["logits"], torch.cat(kept), data.y_test)
        result.metrics.update(vs)
        result.data["quality"]["vs_unquantized"] = vs


def against_reference(
    reference: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor | None = None
) -> dict[str, float]:
    """Top-1 agreement with the unquantized model's predictions (with its 95% Wilson interval) and
    KL(unquantized || quantized) of the class distributions: mean over examples, its standard error,
    and the largest. With the ``labels``, the paired change in loss and accuracy too
    (``paired_change``)."""
    agree = int((logits.argmax(-1) == reference.argmax(-1)).sum())
    n = int(reference.shape[0])
    low, high = wilson_interval(agree, n)
    ref_lp, lp = torch.log_softmax(reference.double(), -1), torch.log_softmax(logits.double(), -1)
    kl = (ref_lp.exp() * (ref_lp - lp)).sum(-1).clamp_min(0.0)
    out = {
        "top1_agree": agree / n,
        "top1_agree_ci_low": low,
        "top1_agree_ci_high": high,
        "kl": float(kl.mean()),
        "kl_se": _se(kl),
        "kl_max": float(kl.max()),
    }
    if labels is not None:
        out.update(paired_change(reference, logits, labels))
    return out


def paired_change(reference: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """The unquantized model's loss and top-1 accuracy, and the quantized model's minus them
    (``delta_loss``, ``delta_accuracy``), each with the standard error of the mean of the
    per-example differences. Pairing by example cancels the test set's own spread (easy and hard
    examples), so it resolves changes far smaller than either accuracy's interval; a change within
    two of its standard errors of zero cannot be told from none on this test split."""
    y = labels.to(reference.device).long()
    ref_loss = F.cross_entropy(reference.double(), y, reduction="none")
    loss = F.cross_entropy(logits.double().to(reference.device), y, reduction="none")
    ref_hit = (reference.argmax(-1) == y).double()
    hit = (logits.to(reference.device).argmax(-1) == y).double()
    return {
        "unquantized_loss": float(ref_loss.mean()),
        "unquantized_accuracy": float(ref_hit.mean()),
        "delta_loss": float((loss - ref_loss).mean()),
        "delta_loss_se": _se(loss - ref_loss),
        "delta_accuracy": float((hit - ref_hit).mean()),
        "delta_accuracy_se": _se(hit - ref_hit),
    }


def _se(x: torch.Tensor) -> float:
    """Standard error of the mean of independent values (NaN for fewer than two)."""
    n = int(x.numel())
    return float(x.std(unbiased=True) / n**0.5) if n > 1 else float("nan")


def speed(cfg, subject, ctx: RunContext, result: Result) -> None:
    """Forward latency of batches of ``speed_batch_sizes`` test inputs; throughput in examples/s."""
    model = subject.model
    device, dtype = model_device(model), input_dtype(model)
    speeds = []
    for bs in cfg.speed_batch_sizes:
        batch = example_inputs(subject.data, bs, device, dtype)
        times = time_forward(
            model, batch, cfg.warmup, StopRule.of(cfg), ctx.progress, desc=f"performance: latency bs={bs}"
        )
        sp = Speed.of_examples(bs, tuple(batch.shape[1:]), Latency.from_values(times))
        result.record(f"speed/bs{bs}", sp)  # metrics bs<b>_latency_*_ms, bs<b>_examples_per_s ...
        speeds.append(sp)
    result.tables["speed"] = [s.row() for s in speeds]
    result.data["speed"] = [s.to_dict() for s in speeds]


def layer_input(subject) -> tuple[torch.Tensor, dict]:
    """One test input (batch 1) for per-module timing, and how to describe it: the trial forward's."""
    from modelxray.kinds.table import kind_of

    batch = kind_of(subject).trial_inputs(subject)
    return batch, {"input_shape": list(batch.shape[1:])}
