"""The training loop from the command line, the Trainer adapter, LoRA, and the train= configs."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import mlflow_runs, run_cli
from modelxray.api import compose
from modelxray.config.components import build_components
from modelxray.core.errors import ConfigError

TRAIN_TINY = [
    "train=finetune_lm",
    "train.steps=6",
    "train.interval=3",
    "train.seq_len=64",
    "train.batch_size=4",
    "train.lr=1e-3",
    "train.checkpoint_every=3",
    "train.dynamics.sparse.probe_seq_len=64",
    "train.dynamics.sparse.every=1",
    "train.dynamics.sparse.ranks=[1,4]",
]


@pytest.mark.slow  # a run.py process end to end (the CI runs the slow suite too)
def test_cli_finetune_tiny_gpt2_logs_one_point_per_interval(tiny, tmp_path, tracking_uri, request):
    args = [*tiny, *TRAIN_TINY, "analyzer.performance.speed_batch_sizes=[1]"]
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client, runs = mlflow_runs(tracking_uri, request.node.name)
    (run,) = runs
    assert run.info.status == "FINISHED"
    rid = run.info.run_id
    for key in (
        "param_change/relative_l2",
        "param_change/sparsity_at_1e-06",
        "grad/global_norm",
        "optim/effective_step_mean",
        "sparse/kl_at_keep_1pct",
        "sparse/kl_at_keep_1pct_random",
        "sparse/rank4_energy",
        "param_change/component/q_proj/mean_abs_delta",
        "param_change/layer_1/sparsity",
    ):
        steps = [m.step for m in client.get_metric_history(rid, key)]
        assert steps == [3, 6], (key, steps)
    assert [m.step for m in client.get_metric_history(rid, "train/loss")] == list(range(1, 7))
    assert [m.step for m in client.get_metric_history(rid, "eval/eval_loss")] == [0, 6]
    # run-level figures of the training and the analyzer that ran on the trained model
    assert run.data.metrics["train/steps"] == 6 and "performance/perplexity" in run.data.metrics
    assert run.data.params["train.lr"] == "0.001" and run.data.params["train"] == "finetune_lm"
    out = next(tmp_path.glob("outputs/*/*"))
    for plot in ("training_curves.png", "param_change_heatmap.png", "grad_norms.png", "sparse_quality.png"):
        assert (out / "plots" / plot).is_file(), plot
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_000003", "step_000006"]
    assert (out / "checkpoints" / "step_000006" / "model.safetensors").is_file()
    artifacts = {a.path for a in client.list_artifacts(rid)}
    assert "checkpoints" not in artifacts and "summary_report.md" in artifacts  # train.log_checkpoints=false
    report = (out / "summary_report.md").read_text()
    assert "**Training**: 6 adamw steps" in report and "### sparse quality" in report
    data = json.loads((out / "analysis_results.json").read_text())
    assert len(data["results"]["train"]["data"]["dynamics_history"]) == 2
    # the checkpoint is a Hugging Face directory that model=file loads back
    from modelxray.models.file import FileSource

    loaded = FileSource(path=str(out / "checkpoints" / "step_000006"), device="cpu").load()
    assert sum(p.numel() for p in loaded.model.parameters()) == int(run.data.metrics["train/total_params"])


def test_trainer_callback_logs_step_indexed_metrics_to_mlflow(tmp_path):
    import mlflow
    from transformers import Trainer, TrainingArguments

    from modelxray.models.tiny_gpt2 import TinyGPT2Source
    from modelxray.training.hf_callback import DynamicsTrainerCallback
    from modelxray.training_dynamics import DynamicsConfig, DynamicsMonitor

    model = TinyGPT2Source(device="cpu").load().model
    gen = torch.Generator().manual_seed(0)
    rows = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 257, (16, 32), generator=gen)]
    args = TrainingArguments(
        output_dir=str(tmp_path / "hf"),
        max_steps=4,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    monitor = DynamicsMonitor.create(DynamicsConfig(interval=2, sparse={"probe_seq_len": 32, "ranks": [1]}))
    trainer = Trainer(model=model, args=args, train_dataset=rows)
    callback = DynamicsTrainerCallback(monitor, trainer)
    trainer.add_callback(callback)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    try:
        mlflow.set_experiment("trainer")
        with mlflow.start_run() as run:
            trainer.train()
    finally:
        mlflow.set_tracking_uri(None)
    client = mlflow.tracking.MlflowClient(uri)
    for key in ("param_change/norm_l2", "grad/global_norm", "optim/effective_step_mean", "sparse/kl_at_1e-06"):
        assert [m.step for m in client.get_metric_history(run.info.run_id, key)] == [2, 4], key
    assert [int(r["step"]) for r in callback.history] == [2, 4]
    # trainer.log reached the Trainer's own log history too (what report_to integrations receive)
    assert any("param_change/norm_l2" in entry for entry in trainer.state.log_history)
    assert monitor.errors == {}


def test_lora_trains_adapters_only_and_merges():
    pytest.importorskip("peft")
    from modelxray.data.pydoc_topics import PydocTopics
    from modelxray.models.tiny_gpt2 import TinyGPT2Source
    from modelxray.training.config import TrainConfig
    from modelxray.training.dynamics_callback import TrainingDynamicsCallback
    from modelxray.training.loop import train
    from modelxray.training.tasks import make_task

    lm = TinyGPT2Source(device="cpu").load()
    data = PydocTopics(seq_len=64, max_tokens=1024).load(lm.tokenizer)
    cfg = TrainConfig(
        steps=4,
        lr=1e-2,
        batch_size=4,
        seq_len=64,
        interval=2,
        lora={"enabled": True, "r": 4},
        dynamics={"sparse": {"enabled": False}},
    )
    cb = TrainingDynamicsCallback(cfg.dynamics)
    out = train(lm.model, make_task("causal_lm", data, cfg), cfg, callbacks=[cb])
    assert out.lora and out.trainable_params < out.total_params / 5
    names = [n for n, _ in out.model.named_parameters()]
    assert not any("lora" in n for n in names)  # merged back into plain weights
    assert set(names) == {n for n, _ in lm.model.named_parameters()}
    changed = [
        n for (n, p), (_, q) in zip(out.model.named_parameters(), lm.model.named_parameters()) if not torch.equal(p, q)
    ]
    assert changed and all("c_attn.weight" in n for n in changed)
    assert cb.history[-1]["param_change/component/lora/mean_abs_delta"] > 0


def test_train_configs_validate_with_the_key_named():
    cfg = compose(["model=tiny_gpt2", "train=finetune_lm"])
    comps = build_components(cfg)
    assert comps.train.steps == 50 and comps.train.dynamics.interval == comps.train.interval == 10
    assert comps.train.dynamics.sparse.every == 5
    assert build_components(compose(["model=tiny_gpt2"])).train is None  # train=none
    for override, match in (
        ("train.lora.r=0", "train.lora.r: must be positive"),
        ("+train.dynamics.sparse.color=red", "train.dynamics.sparse.color: unknown key"),
        ("+train.dynamics.interval=3", "train.dynamics.interval: set train.interval"),
        ("train.optimizer=lion", "train.optimizer: must be one of"),
        ("train.betas=[0.9]", "train.betas: must be two numbers"),
        ("train.dynamics.param_change.quantiles=[1.5]", "quantiles: each must lie"),
    ):
        with pytest.raises(ConfigError, match=match):
            build_components(compose(["model=tiny_gpt2", "train=finetune_lm", override]))


@pytest.mark.slow  # a run.py process end to end (the CI runs the slow suite too)
def test_too_little_training_text_is_a_clear_error(tiny, tmp_path):
    proc = run_cli([*tiny, "train=finetune_lm", "dataset.max_tokens=465000", "train.seq_len=512"], tmp_path)
    assert proc.returncode == 2
    assert "train.seq_len: only" in proc.stderr and "lower dataset.max_tokens" in proc.stderr
