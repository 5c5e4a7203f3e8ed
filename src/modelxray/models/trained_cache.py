"""Weights of models trained here (the digits classifiers, the digits CLIP, the text and
vision-language defaults), kept on disk by the settings that shaped them, so a second run loads
instead of training again; and the training loop and directory handling those defaults share."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def cache_file(cache_dir: str, stem: str, settings: dict[str, Any], version: int) -> Path:
    """``<cache_dir>/<stem>-<hash of settings and version>.safetensors``."""
    digest = hashlib.sha256(json.dumps([version, settings], sort_keys=True).encode()).hexdigest()[:16]
    return Path(cache_dir).expanduser() / f"{stem}-{digest}.safetensors"


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
        if not source.use_disk_cache:
            directory = Path(source.cache_dir).expanduser() / f"{name}-uncached"
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
