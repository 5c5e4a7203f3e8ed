"""Weights of models trained here (the digits classifiers, the digits CLIP, the text and
vision-language defaults): the ones shipped with modelxray for the default settings, and this
machine's own trainings kept on disk by the settings that shaped them; and the training loop and
directory handling those defaults share.

Every default trains reproducibly (``reproducible_training``): on one intra-op thread with PyTorch's
deterministic algorithms, whatever ``threads`` the run uses, so training it afresh gives the cached
weights byte for byte. What floating-point results still depend on (the torch version and the CPU's
vector instruction set) is part of the cache key, so a cache copied between machines never mixes
models trained differently. The defaults' weights ship in ``models/shipped`` (written by
``scripts/ship_trained_defaults.py``, named without the platform, listed with their digests in its
manifest), so every machine loads the same weights and nothing trains on first use;
``model.retrain=true`` trains afresh into the machine's own cache."""

from __future__ import annotations

import hashlib
import json
import logging
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelxray.core.errors import ConfigError

# one thread: a reduction split over threads sums in another order, so its result depends on their count
TRAINING_THREADS = 1
log = logging.getLogger("modelxray.models")
SHIPPED = Path(__file__).with_name("shipped")  # the defaults' weights, shipped with modelxray
MANIFEST = "manifest.json"  # in SHIPPED: each entry's settings, files and their sha256, platform and command
SHIP = "python scripts/ship_trained_defaults.py"  # the command that writes SHIPPED


def training_platform() -> dict[str, str | int]:
    """What a default's trained weights depend on besides its settings: the training threads, the
    torch version and the CPU's vector instruction set (its kernels round differently)."""
    import torch

    return {
        "threads": TRAINING_THREADS,
        "torch": torch.__version__.split("+")[0],
        "cpu": torch.backends.cpu.get_cpu_capability(),
    }


@dataclass
class TrainedKey:
    """What names one trained model's weights: its stem, every setting that shapes them and the
    format version of its training (bumped when training changes, so stale weights are not reused)."""

    stem: str
    settings: dict[str, Any]
    version: int
    directory: bool = False  # a Hugging Face directory (config, weights, tokenizer), not one safetensors file

    def _name(self, *platform: dict) -> str:
        digest = hashlib.sha256(json.dumps([self.version, self.settings, *platform], sort_keys=True).encode())
        return f"{self.stem}-{digest.hexdigest()[:16]}" + ("" if self.directory else ".safetensors")

    def cache_path(self, cache_dir: str) -> Path:
        """This machine's own training under ``cache_dir``: keyed by its platform too, so a cache
        copied between machines never mixes weights trained differently."""
        return Path(cache_dir).expanduser() / self._name(training_platform())

    @property
    def shipped_name(self) -> str:
        """The name of the shipped entry: without the platform, as every machine loads the same one."""
        return self._name()


def file_sha256(path: Path) -> str:
    """The file's sha256, read in chunks (a shipped file is checked before it loads)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(folder: Path | None = None) -> dict[str, dict]:
    """The entries shipped in ``folder`` (``SHIPPED``) by name; none when it holds no manifest."""
    path = (folder or SHIPPED) / MANIFEST
    return json.loads(path.read_text())["entries"] if path.is_file() else {}


def verified(folder: Path, name: str, entry: dict) -> Path:
    """The shipped entry ``name`` (its file or directory) once every file matches the manifest's
    sha256: a damaged or partial copy stops the run, never loads as other weights."""
    fix = f"run {SHIP} or set model.retrain=true"
    for rel, digest in entry["files"].items():
        path = folder / rel
        if not path.is_file():
            raise ConfigError(str(path), f"missing, though {MANIFEST} lists it; {fix}")
        if file_sha256(path) != digest:
            raise ConfigError(str(path), f"sha256 differs from the one {MANIFEST} lists; {fix}")
    return folder / name


def shipped_note(entry: dict, path: Path, how: str) -> str:
    """The model's note for shipped weights: which script trained them, on which platform."""
    p = entry["platform"]
    return (
        f"the weights shipped with modelxray for these settings ({how}), trained by {entry['command']} "
        f"on torch {p['torch']}, {p['cpu']} CPU; loaded from {path}"
    )


def weights_to_load(key: TrainedKey, source: Any, how: str) -> tuple[Path | None, str]:
    """Where ``key``'s weights come from and the note saying so: those shipped with modelxray for
    exactly these settings, else this machine's earlier training (``source.use_disk_cache``), else
    ``(None, "")``: train them. ``source.retrain`` skips both and trains afresh."""
    if source.retrain:
        return None, ""
    entry = read_manifest().get(key.shipped_name)
    if entry is not None:
        path = verified(SHIPPED, key.shipped_name, entry)
        return path, shipped_note(entry, path, how)
    cached = key.cache_path(source.cache_dir)
    if source.use_disk_cache and (cached / "config.json" if key.directory else cached).is_file():
        return cached, f"trained before with these settings ({how}), loaded from {cached}"
    return None, ""


def training_target(key: TrainedKey, source: Any) -> Path | None:
    """Where weights trained now are kept: this machine's platform-keyed cache (never the shipped
    folder), or nowhere with ``model.use_disk_cache=false``."""
    return key.cache_path(source.cache_dir) if source.use_disk_cache else None


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


def load_trained_weights(source: Any, net: Any, how: str, what: str, train) -> str:
    """``net`` given the shipped or cached weights for ``source.trained_key()`` (``weights_to_load``;
    ``how`` says in short how they were trained), else trained now by ``train()`` (which returns the
    note saying how; ``what`` is announced first) and cached on this machine. Returns the note."""
    key = source.trained_key()
    found, note = weights_to_load(key, source, how)
    if found is not None:
        from safetensors.torch import load_file

        net.load_state_dict(load_file(str(found)))
        return note
    cached = training_target(key, source)
    with reproducible_training(key.stem, what, cached):
        note = train()
    if cached is not None:
        save_weights(net.state_dict(), cached)
    return note


def load_trained_directory(source: Any, name: str, train_into, kind: str | None = None) -> Any:
    """A model trained and kept as a Hugging Face directory: the shipped or cached one for
    ``source.trained_key()`` (``weights_to_load``), else ``train_into(directory)`` (which writes it
    and returns the note saying how) into this machine's cache; copied to ``source.save_pretrained``
    when set; loaded as ``model=hf`` loads that directory (as ``kind`` where given), named
    ``name``, the note first."""
    import shutil

    from modelxray.models.hf import HFSource

    key = source.trained_key()
    directory, note = weights_to_load(key, source, f"{source.steps} steps, seed {source.seed}")
    if directory is None:
        cached = training_target(key, source)
        directory = cached or Path(source.cache_dir).expanduser() / f"{name}-uncached"
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
