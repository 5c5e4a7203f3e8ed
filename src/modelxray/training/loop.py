"""The one training loop of modelxray: every ``train=`` preset runs through ``train()``.

It trains a copy of the model (the per-process cache keeps the original), logs step-indexed
metrics through ``log(metrics, step)``, calls the callbacks (dynamics monitor, learning dynamics)
with the training forward's logits so they need no second pass, and saves checkpoints as
safetensors. The loop stays thin on purpose: its overhead over a bare PyTorch loop is measured in
``scripts/bench_dynamics.py``.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from modelxray.core.callbacks import Callback, TrainState
from modelxray.core.progress import bar as progress_bar
from modelxray.training.config import TrainConfig

LogFn = Callable[[dict[str, float], int], None]


@dataclass
class TrainOutcome:
    model: nn.Module
    steps: int
    seconds: float
    callback_seconds: dict[str, float]
    history: list[dict[str, float]] = field(default_factory=list)  # train loss/lr per logged step
    evals: list[dict[str, float]] = field(default_factory=list)  # {"step": s, ...} per evaluation
    checkpoints: list[str] = field(default_factory=list)
    examples: int = 0  # tokens (LM) or examples (classifiers) seen
    trainable_params: int = 0
    total_params: int = 0
    lora: bool = False


def make_optimizer(params, cfg: TrainConfig) -> torch.optim.Optimizer:
    params = list(params)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    return cls(params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay)


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Multiplier of ``lr`` for optimizer step ``step`` (0-based): linear warm-up, then the schedule."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    span = max(cfg.steps - cfg.warmup_steps, 1)
    done = min(max(step - cfg.warmup_steps, 0) / span, 1.0)
    return 1.0 - done if cfg.schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * done))


def default_lora_targets(model: nn.Module) -> list[str]:
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    if {"q_proj", "v_proj"} <= names:
        return ["q_proj", "v_proj"]
    if "c_attn" in names:
        return ["c_attn"]
    raise ValueError(
        "train.lora.target_modules: cannot guess which modules to adapt in this model; name them, "
        "e.g. train.lora.target_modules=[q_proj,v_proj]"
    )


def wrap_lora(model: nn.Module, cfg) -> nn.Module:
    from peft import LoraConfig, get_peft_model

    targets = cfg.target_modules or default_lora_targets(model)
    fan_in_fan_out = "c_attn" in targets or "c_fc" in targets  # GPT-2's Conv1D stores W transposed
    return get_peft_model(
        model,
        LoraConfig(
            r=cfg.r,
            lora_alpha=cfg.alpha,
            lora_dropout=cfg.dropout,
            target_modules=targets,
            fan_in_fan_out=fan_in_fan_out,
        ),
    )


def save_checkpoint(model: nn.Module, folder: Path, step: int, lora: bool) -> Path:
    """``step_<n>/``: a Hugging Face directory (config.json + model.safetensors, loadable with
    ``model=file model.path=...``), the LoRA adapter alone, or ``model.safetensors`` for plain modules."""
    out = folder / f"step_{step:06d}"
    out.mkdir(parents=True, exist_ok=True)
    if lora or hasattr(model, "save_pretrained"):
        model.save_pretrained(out, safe_serialization=True)
    else:
        from safetensors.torch import save_model

        save_model(model, str(out / "model.safetensors"))
    return out


def _seconds(fn, timings: dict[str, float], name: str):
    t0 = time.perf_counter()
    try:
        return fn()
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - t0


def _hooks(callbacks) -> dict[str, list[tuple[str, Callable]]]:
    """Per hook, ``(name, bound method)`` of the callbacks that implement it: a full-batch run calls
    ``on_step_end`` and ``on_epoch_end`` every step, and the base class's empty hooks need no call
    (nor a timing); ``train`` still reports a (zero) time for a callback that implements none."""
    out: dict[str, list[tuple[str, Callable]]] = {}
    for hook in ("on_train_begin", "on_step_end", "on_epoch_end", "on_train_end"):
        base = getattr(Callback, hook)
        bound = [(cb.name, getattr(cb, hook)) for cb in callbacks]
        out[hook] = [(name, fn) for name, fn in bound if getattr(fn, "__func__", None) is not base]
    return out


def train(
    model: nn.Module,
    task,
    cfg: TrainConfig,
    *,
    callbacks: list[Callback] = (),
    log: LogFn | None = None,
    output_dir: Path | None = None,
    copy_model: bool = True,
    progress: bool = True,
) -> TrainOutcome:
    """Train ``model`` (a copy of it unless ``copy_model=False``) on ``task`` for ``cfg.steps`` steps."""
    log = log or (lambda metrics, step: None)
    if copy_model:
        model = copy.deepcopy(model)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        if cfg.lora.enabled:
            model = wrap_lora(model, cfg.lora)
        model.train()
        if not cfg.lora.enabled:  # full fine-tuning: every parameter trains (LoRA froze the base weights)
            for p in model.parameters():
                p.requires_grad_(True)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = make_optimizer(params, cfg)
        base_lrs = [g["lr"] for g in optimizer.param_groups]
        state = TrainState(model=model, optimizer=optimizer, max_steps=cfg.steps, task=task)
        state.probe = task.probe(cfg.dynamics.sparse.probe_batch, cfg.dynamics.sparse.probe_seq_len)
        timings: dict[str, float] = {}
        outcome = TrainOutcome(
            model,
            0,
            0.0,
            timings,
            lora=cfg.lora.enabled,
            trainable_params=sum(p.numel() for p in params),
            total_params=sum(p.numel() for p in model.parameters()),
        )

        hooks = _hooks(callbacks)

        def run_hook(hook: str) -> None:
            for name, fn in hooks[hook]:
                t0 = time.perf_counter()
                try:
                    metrics = fn(state)
                finally:
                    timings[name] = timings.get(name, 0.0) + time.perf_counter() - t0
                if metrics:
                    log(metrics, state.step)

        def evaluate() -> None:
            values = _seconds(lambda: task.evaluate(model), timings, "evaluation")
            outcome.evals.append({"step": state.step, **values})
            log({f"eval/{k}": v for k, v in values.items()}, state.step)

        evaluate()
        for cb in callbacks:
            timings.setdefault(cb.name, 0.0)
        run_hook("on_train_begin")
        batches = task.batches()
        start = time.perf_counter()
        bar = progress_bar(range(cfg.steps), desc="train", enabled=progress)
        for step in bar:
            for g, base in zip(optimizer.param_groups, base_lrs):
                g["lr"] = base * lr_factor(step, cfg)
            total_loss = 0.0
            for _ in range(cfg.grad_accum):
                epoch, batch = next(batches)
                if epoch != state.epoch:  # the previous micro-batch closed an epoch
                    run_hook("on_epoch_end")
                    state.epoch = epoch
                loss, logits, example_loss = task.loss(model, batch)
                (loss / cfg.grad_accum if cfg.grad_accum > 1 else loss).backward()  # x / 1: two kernels for nothing
                total_loss += float(loss.detach()) / cfg.grad_accum
                outcome.examples += task.tokens(batch)
            grad_norm = None
            if cfg.max_grad_norm is not None:
                grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
            optimizer.step()
            state.step = step + 1
            state.grad_norm = grad_norm
            state.clip_coef = min(1.0, cfg.max_grad_norm / (grad_norm + 1e-6)) if grad_norm is not None else 1.0
            state.loss, state.lr = total_loss, optimizer.param_groups[0]["lr"]
            state.batch, state.logits, state.indices = batch, logits.detach(), batch.get("indices")
            state.example_loss = example_loss
            run_hook("on_step_end")
            optimizer.zero_grad(set_to_none=True)
            if state.step % cfg.log_every == 0 or state.step == cfg.steps:
                row = {"train/loss": total_loss, "train/lr": state.lr}
                if grad_norm is not None:
                    row["train/grad_norm"] = grad_norm
                outcome.history.append({"step": state.step, **row})
                log(row, state.step)
                bar.set_postfix(loss=f"{total_loss:.4f}")
            if cfg.eval_every and state.step % cfg.eval_every == 0 and state.step != cfg.steps:
                evaluate()
            if cfg.checkpoint_every and state.step % cfg.checkpoint_every == 0 and output_dir is not None:
                folder = Path(cfg.checkpoint_dir) if cfg.checkpoint_dir else Path(output_dir) / "checkpoints"
                path = _seconds(
                    lambda: save_checkpoint(model, folder, state.step, cfg.lora.enabled), timings, "checkpoints"
                )
                outcome.checkpoints.append(str(path))
        outcome.seconds = time.perf_counter() - start
        state.epoch += 1
        run_hook("on_epoch_end")
        evaluate()
        run_hook("on_train_end")
        outcome.steps = state.step
        model.eval()
        if cfg.lora.enabled and cfg.lora.merge:
            model = model.merge_and_unload()
        outcome.model = model
        return outcome
