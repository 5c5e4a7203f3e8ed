"""``ModelAnalysisManager`` on a language model: with and without a batch, padded token batches,
and ``reset()`` after the set of trained parameters changes.

    python examples/analysis_manager_language_model.py

On modelxray's tiny GPT-2 (2 layers, byte tokenizer, built offline) fine-tuned with AdamW on
windows of the Python documentation text, about 10 s on 2 cores:

* parameter change: ``AnalysisConfig(interval=100, param_change_enabled=True)`` and
  ``on_optimizer_step(model)`` with no batch: the manager handles the snapshots, and the
  sparse-quality family, which needs a batch, is skipped with one warning;
* sparse quality: ``on_optimizer_step(model, inputs={"input_ids": ..., "attention_mask": ...})``:
  the ``sparse/*`` metrics at each threshold, with the random baseline; padded positions
  (attention mask 0) are left out of the comparison;
* a changed set of parameters: freezing a layer changes the parameters the snapshot captured, the
  next measurement says to call ``analyzer.reset()``, and after it the manager measures again.
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is built locally
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from pydoc_data.topics import topics  # noqa: E402

import torch  # noqa: E402

from modelxray.models.tiny_gpt2 import TinyGPT2Source  # noqa: E402
from modelxray.training_dynamics import AnalysisConfig, DynamicsError, ModelAnalysisManager  # noqa: E402

SEQ_LEN, BATCH = 32, 4


def batches(tokenizer, n: int) -> list[dict[str, torch.Tensor]]:
    """``n`` batches of ``BATCH`` x ``SEQ_LEN`` tokens; the last 8 positions of each batch's last row
    are padding (attention mask 0, label -100)."""
    text = "\n\n".join(topics[k] for k in sorted(topics))
    ids = torch.tensor(tokenizer.encode(text[: n * BATCH * SEQ_LEN])[: n * BATCH * SEQ_LEN]).view(n, BATCH, SEQ_LEN)
    out = []
    for rows in ids:
        mask = torch.ones_like(rows)
        mask[-1, -8:] = 0
        out.append({"input_ids": rows, "attention_mask": mask, "labels": rows.masked_fill(mask == 0, -100)})
    return out


def train_step(model, optimizer, batch) -> None:
    optimizer.zero_grad()
    model(**batch).loss.backward()
    optimizer.step()


def param_change(model, optimizer, data) -> tuple[ModelAnalysisManager, dict[str, float]]:
    """Parameter change only, no batch passed: the manager keeps the snapshots."""
    config = AnalysisConfig(interval=100, param_change_enabled=True)
    analyzer = ModelAnalysisManager.create(config)
    for batch in data:
        train_step(model, optimizer, batch)
        metrics = analyzer.on_optimizer_step(model)  # Handles snapshot lifecycle
    return analyzer, metrics


def sparse_quality(model, optimizer, data) -> tuple[ModelAnalysisManager, dict[str, float]]:
    """Sparse quality on the step's token batch, its attention mask leaving the padding out."""
    config = AnalysisConfig(interval=100, sparse_quality_enabled=True)
    analyzer = ModelAnalysisManager.create(config)
    for batch in data:
        train_step(model, optimizer, batch)
        input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
        metrics = analyzer.on_optimizer_step(model, inputs={"input_ids": input_ids, "attention_mask": attention_mask})
    return analyzer, metrics


def check_finite(metrics: dict[str, float]) -> None:
    bad = [k for k, v in metrics.items() if not math.isfinite(v)]
    assert not bad, bad


def main() -> None:
    torch.set_num_threads(1)
    lm = TinyGPT2Source(device="cpu").load()
    model, data = lm.model, batches(lm.tokenizer, 101)  # the first call snapshots, the 101st measures
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    analyzer, metrics = param_change(model, optimizer, data)
    assert analyzer.measurements == 1 and metrics["param_change/steps"] == 100.0
    for key in ("norm_l2", "norm_l1", "norm_max", "mean", "std", "sparsity_at_1e-06", "changed_ratio_at_1e-06"):
        assert f"param_change/{key}" in metrics, key
    assert not any(k.startswith("sparse/") for k in metrics)
    assert any("no probe batch" in w for w in analyzer.warnings), analyzer.warnings
    check_finite(metrics)
    print(f"parameter change: relative L2 change over 100 steps {metrics['param_change/relative_l2']:.4f}")

    analyzer, metrics = sparse_quality(model, optimizer, data)
    for t in ("1e-08", "1e-06", "1e-04"):
        for m in ("kl", "cosine", "mse", "top1_agree", "kept_ratio", "unchanged_ratio"):
            assert f"sparse/{m}_at_{t}" in metrics, (m, t)
        for m in ("kl", "cosine", "mse", "top1_agree"):
            assert f"sparse/{m}_at_{t}_random" in metrics, (m, t)
        assert math.isclose(metrics[f"sparse/kept_ratio_at_{t}"] + metrics[f"sparse/unchanged_ratio_at_{t}"], 1.0)
    assert metrics["sparse/kl_at_1e-08"] >= 0.0 and metrics["sparse/top1_agree_at_1e-08"] <= 1.0
    check_finite(metrics)
    assert not analyzer.errors, analyzer.errors
    print(
        "sparse quality, keep |dW| > 1e-4: "
        f"kept {metrics['sparse/kept_ratio_at_1e-04']:.3f}, KL {metrics['sparse/kl_at_1e-04']:.2e} "
        f"(random mask of the same size: {metrics['sparse/kl_at_1e-04_random']:.2e})"
    )

    # a parameter mismatch: which parameters train changes after a snapshot
    analyzer = ModelAnalysisManager.create(AnalysisConfig(interval=1, sparse_quality_enabled=False))
    train_step(model, optimizer, data[0])
    assert analyzer.on_optimizer_step(model) == {}  # the snapshot
    model.transformer.wte.weight.requires_grad_(False)
    train_step(model, optimizer, data[1])
    try:
        analyzer.on_optimizer_step(model)
        raise AssertionError("a changed set of parameters must be reported")
    except DynamicsError as exc:
        assert "reset()" in str(exc), exc
        print(f"after freezing the embeddings: {exc}")
    analyzer.reset()
    assert analyzer.on_optimizer_step(model) == {}  # a new snapshot of the new set of parameters
    train_step(model, optimizer, data[2])
    metrics = analyzer.on_optimizer_step(model)
    assert metrics["param_change/norm_l2"] > 0
    check_finite(metrics)
    print("all checks passed")


if __name__ == "__main__":
    main()
