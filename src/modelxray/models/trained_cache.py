"""Weights of models trained here (the digits classifiers, the digits CLIP, the text and
vision-language defaults), kept on disk by the settings that shaped them, so a second run loads
instead of training again; and the training loop and directory handling those defaults share.

Every default trains reproducibly (``reproducible_training``): on one intra-op thread with PyTorch's
deterministic algorithms, whatever ``threads`` the run uses, so training it afresh gives the cached
weights byte for byte. What floating-point results still depend on (the torch version and the CPU's
vector instruction set) is part of the cache key, so a cache copied between machines never mixes
models trained differently."""

from __future__ import annotations

import hashlib
import json
import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# one thread: a reduction split over threads sums in another order, so its result depends on their count
TRAINING_THREADS = 1
log = logging.getLogger("modelxray.models")


def training_platform() -> dict[str, str | int]:
    """What a default's trained weights depend on besides its settings: the training threads, the
    torch version and the CPU's vector instruction set (its kernels round differently)."""
    import torch

    return {
        "threads": TRAINING_THREADS,
        "torch": torch.__version__.split("+")[0],
        "cpu": torch.backends.cpu.get_cpu_capability(),
    }


def cache_file(cache_dir: str, stem: str, settings: dict[str, Any], version: int) -> Path:
    """``<cache_dir>/<stem>-<hash of settings, version and training platform>.safetensors``."""
    key = [version, settings, training_platform()]
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return Path(cache_dir).expanduser() / f"{stem}-{digest}.safetensors"


def about(seconds: float) -> str:
    """An expected duration in words: "about 15 s", "about 4 min"."""
    return f"about {seconds:.0f} s" if seconds < 90 else f"about {seconds / 60:.0f} min"


@contextmanager
def reproducible_training(name: str, what: str, path: Path | None):
    """Train ``name`` on ``TRAINING_THREADS`` threads with deterministic algorithms (the run's own
    settings are restored after), saying first what is trained and where it will be kept."""
    import torch

    where = f"cached at {path}" if path is not None else "not cached: model.use_disk_cache=false"
    log.info("Training %s once (%s; %s)", name, what, where)
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.set_num_threads(TRAINING_THREADS)
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)


def save_weights(state_dict: dict, path: Path) -> None:
    """Write atomically: parallel jobs never read half a file."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    save_file({k: v.contiguous() for k, v in state_dict.items()}, str(tmp))
    tmp.replace(path)


def write_directory(directory: Path, *parts: Any) -> None:
    """Every part (a model, tokenizer or processor by its ``save_pretrained``, or a function of the
    directory) written into ``directory`` atomically: beside it first, then moved in place, so a
    parallel job never loads half a directory."""
    import random
    import shutil

    tmp = directory.with_name(directory.name + f".tmp{random.randrange(1 << 30)}")
    for part in parts:
        part.save_pretrained(tmp) if hasattr(part, "save_pretrained") else part(tmp)
    if directory.exists():
        shutil.rmtree(directory)
    tmp.replace(directory)


def load_trained_directory(source: Any, name: str, train_into, kind: str | None = None) -> Any:
    """A model trained here and kept as a Hugging Face directory: ``source.cache_path()`` when
    ``source.use_disk_cache`` and it was trained before, else ``train_into(directory)`` (which writes
    it and returns the note saying how); copied to ``source.save_pretrained`` when set; loaded as
    ``model=hf`` loads that directory (as ``kind`` where given), named ``name``, the note first."""
    import shutil

    from modelxray.models.hf import HFSource

    directory = source.cache_path()
    if source.use_disk_cache and (directory / "config.json").is_file():
        note = f"trained before with these settings ({source.steps} steps, seed {source.seed}), loaded from {directory}"
    else:
        cached = directory if source.use_disk_cache else None
        if not source.use_disk_cache:
            directory = Path(source.cache_dir).expanduser() / f"{name}-uncached"
        what = f"{source.steps} steps of AdamW, {about(source.seconds_per_step * source.steps)} on one core"
        with reproducible_training(name, what, cached):
            note = train_into(directory)
    if source.save_pretrained:
        shutil.copytree(directory, Path(source.save_pretrained).expanduser(), dirs_exist_ok=True)
    loaded = HFSource(name_or_path=str(directory), dtype=source.dtype, device=source.device, kind=kind or "auto").load()
    loaded.info.name = name
    loaded.info.source_format = "config"
    loaded.info.notes = [note, *loaded.info.notes]
    return loaded


def optimize(
    net: Any, loss_of, steps: int, lr: float, weight_decay: float, desc: str, progress: bool, schedule: str = "linear"
) -> float:
    """``steps`` of AdamW on ``loss_of(step)`` (a scalar loss), with a linear warm-up over 5% of the
    steps, then (``linear``) linear decay to 5% of ``lr`` or (``step``, DETR's recipe) ``lr`` held
    until the last 10% of the steps and a tenth of it for those; gradients clipped at norm 1.
    Returns the mean loss of the last 50 steps."""
    import torch

    from modelxray.core.progress import bar

    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=weight_decay)
    warm = max(1, steps // 20)

    def after_warm_up(s: int) -> float:
        if schedule == "step":
            return 1.0 if s < steps - steps // 10 else 0.1
        return max(0.05, (steps - s) / (steps - warm + 1))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warm, after_warm_up(s)))
    recent: list[float] = []
    net.train()
    with torch.enable_grad():
        for step in bar(range(steps), desc=desc, enabled=progress):
            loss = loss_of(step)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            sched.step()
            recent = [*recent[-49:], float(loss.detach())]
    net.eval()
    return sum(recent) / len(recent)
