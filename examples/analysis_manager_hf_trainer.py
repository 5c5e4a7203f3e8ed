"""``ModelAnalysisManager`` inside ``transformers.Trainer``: a ``TrainerCallback`` of your own that
measures at every optimizer step and logs under ``analysis/``.

    python examples/analysis_manager_hf_trainer.py

``ModelAnalysisCallback`` calls ``analyzer.on_optimizer_step`` from ``on_step_end`` and logs what it
returns; it runs inside ``transformers.Trainer`` (TRL's trainers such as ``GRPOTrainer`` are
Trainers and take it the same way, ``callbacks=[callback]``; they need a reward model and
generation, so the plain Trainer shows it here) fine-tuning modelxray's tiny GPT-2 (2 layers, byte
tokenizer, built offline) for 201 steps on windows of the Python documentation text; about 15 s on
2 cores. ``wandb`` is a recorder module standing in for Weights & Biases. The asserts check the
analysis metrics logged under ``analysis/`` every 100 optimizer steps, the parameter-change
statistics by name and finite; the Trainer passes no batch to ``on_step_end``, so the
sparse-quality family, which needs one, is skipped with one warning and training goes on.
modelxray's ready-made callback, ``DynamicsTrainerCallback``, is in docs/training_dynamics.md.
"""

from __future__ import annotations

import importlib.machinery
import math
import os
import sys
import tempfile
import types

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is built locally
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from pydoc_data.topics import topics  # noqa: E402

import torch  # noqa: E402
from transformers import Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from modelxray.models.tiny_gpt2 import TinyGPT2Source  # noqa: E402
from modelxray.training_dynamics import AnalysisConfig, ModelAnalysisManager  # noqa: E402

STEPS = 201  # the first call snapshots; steps 101 and 201 measure
SEQ_LEN = 32


def recorder_module() -> types.ModuleType:
    """A module named ``wandb`` whose ``log`` keeps every dict (``wandb.logged``)."""
    module = types.ModuleType("wandb")
    module.__spec__ = importlib.machinery.ModuleSpec("wandb", None)
    module.logged = []
    module.log = lambda metrics: module.logged.append(dict(metrics))
    return module


class ModelAnalysisCallback(TrainerCallback):
    def __init__(self, analyzer: ModelAnalysisManager):
        self.analyzer = analyzer

    def on_step_end(self, args, state, control, **kwargs):
        model = kwargs.get("model")
        inputs = kwargs.get("inputs")  # Optional

        metrics = self.analyzer.on_optimizer_step(model, inputs=inputs)
        if metrics:
            import wandb

            wandb.log({f"analysis/{k}": v for k, v in metrics.items()})


def token_windows(tokenizer, n: int) -> list[dict[str, torch.Tensor]]:
    """``n`` windows of ``SEQ_LEN`` tokens of the Python documentation topics, as causal-LM examples."""
    text = "\n\n".join(topics[k] for k in sorted(topics))[: n * SEQ_LEN]
    ids = torch.tensor(tokenizer.encode(text)[: n * SEQ_LEN]).view(n, SEQ_LEN)
    return [{"input_ids": row, "labels": row} for row in ids]


def train_with_callback(model, train_dataset, output_dir: str) -> ModelAnalysisManager:
    """The manager, its callback and a Trainer that calls it (``GRPOTrainer`` takes it the same way)."""
    # Usage
    config = AnalysisConfig(interval=100)
    analyzer = ModelAnalysisManager.create(config)
    callback = ModelAnalysisCallback(analyzer)

    args = TrainingArguments(
        output_dir=output_dir,
        max_steps=STEPS,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        use_cpu=True,
        seed=0,
    )
    trainer = Trainer(model=model, args=args, train_dataset=train_dataset, callbacks=[callback])
    trainer.train()
    return analyzer


def main() -> None:
    torch.set_num_threads(1)
    wandb = sys.modules["wandb"] = recorder_module()
    lm = TinyGPT2Source(device="cpu").load()
    with tempfile.TemporaryDirectory() as tmp:
        analyzer = train_with_callback(lm.model, token_windows(lm.tokenizer, 256), tmp)
    assert analyzer.step == STEPS and len(wandb.logged) == analyzer.measurements == 2, len(wandb.logged)
    for logged in wandb.logged:
        assert all(k.startswith("analysis/") for k in logged)
        for key in ("norm_l2", "norm_l1", "norm_max", "mean", "std", "sparsity_at_1e-06", "changed_ratio_at_1e-06"):
            assert f"analysis/param_change/{key}" in logged, key
        assert logged["analysis/param_change/steps"] == 100.0 and logged["analysis/param_change/norm_l2"] > 0
        assert not any(k.startswith("analysis/sparse/") for k in logged)
        bad = [k for k, v in logged.items() if not math.isfinite(v)]
        assert not bad, bad
    assert any("sparse quality skipped: no probe batch" in w for w in analyzer.warnings), analyzer.warnings
    assert not analyzer.errors, analyzer.errors
    last = wandb.logged[-1]
    print(
        f"{len(wandb.logged)} measurements of {len(last)} metrics; "
        f"relative change over the last 100 steps {last['analysis/param_change/relative_l2']:.4f}"
    )
    print("all checks passed")


if __name__ == "__main__":
    main()
