"""A small MLP, CNN or vision transformer on scikit-learn's digits: real, trained classifiers offline.

Given no checkpoint, the defaults (``digits_mlp``, its ``arch=cnn``, ``digits_vit``: a Hugging Face
``ViTForImageClassification`` on 2x2-pixel patches) load the weights shipped with modelxray. Other
settings, or ``retrain=true``, train here (Adam, seeded, on the train part of the same split the
``digits`` dataset evaluates: the MLP and CNN in a few seconds, the ViT in about 20 s on one core)
and cache the weights on disk, keyed by every setting that shapes them, so a second run loads them.
A checkpoint (a state dict of the same architecture, .pt or .safetensors) is loaded with
``weights_only=True``. torch is imported when a model is built, not with the config."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from modelxray.core.errors import ConfigError
from modelxray.core.subject import LoadedModel, ModelInfo
from modelxray.data.digits import load_digits_split
from modelxray.models.base import ModelSource
from modelxray.models.trained_cache import TrainedKey

if TYPE_CHECKING:
    from torch import nn


ARCHS = ("mlp", "cnn", "vit")
CACHE_FORMAT = 1  # bump when training changes, so stale cached weights are not reused
# measured training seconds per epoch on one thread (the announcement's estimate, not a limit)
SECONDS_PER_EPOCH = {"mlp": 0.02, "cnn": 0.1, "vit": 0.3}


DIGIT_SHAPE = (1, 8, 8)  # scikit-learn's digits: one grey channel, 8x8 pixels


def build_digits_model(
    arch: str, hidden: list[int], channels: list[int], n_classes: int = 10, vit: dict | None = None
) -> nn.Sequential:
    """``mlp``: 64 pixels -> hidden layers (ReLU) -> classes. ``cnn``: 8x8 image -> 3x3 convs (ReLU),
    2x2 max-pool -> linear classifier. ``vit``: 8x8 image -> patches -> transformer encoder -> classes
    (``vit``: patch_size, dim, depth, heads). Every one takes the flat 64 pixels in [0, 1], or 1x8x8
    images (another image dataset fit to the digits' size)."""
    from torch import nn

    from modelxray.models.hf_vision import ToImage

    layers: list[nn.Module] = []
    if arch == "vit":
        from transformers import ViTConfig, ViTForImageClassification

        from modelxray.models.hf_vision import PixelClassifier

        v = vit or {}
        config = ViTConfig(
            image_size=8,
            num_channels=1,
            patch_size=v.get("patch_size", 2),
            hidden_size=v.get("dim", 32),
            num_hidden_layers=v.get("depth", 2),
            num_attention_heads=v.get("heads", 2),
            intermediate_size=2 * v.get("dim", 32),
            num_labels=n_classes,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
        return nn.Sequential(
            ToImage(DIGIT_SHAPE), PixelClassifier(ViTForImageClassification(config), [0.0], [1.0], DIGIT_SHAPE)
        )
    if arch == "mlp":
        width = 64
        layers.append(nn.Flatten())
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
    else:
        layers.append(ToImage(DIGIT_SHAPE))
        width = 1
        for c in channels:
            layers += [nn.Conv2d(width, c, 3, padding=1), nn.ReLU()]
            width = c
        layers += [nn.MaxPool2d(2), nn.Flatten()]
        width = width * 16
    layers.append(nn.Linear(width, n_classes))
    return nn.Sequential(*layers)


@dataclass
class DigitsClassifierSource(ModelSource):
    kind_of_source: ClassVar[str | None] = "image_classification"
    arch: str = "mlp"
    hidden: list[int] = field(default_factory=lambda: [64])
    channels: list[int] = field(default_factory=lambda: [8, 16])
    patch_size: int = 2  # vit: square patches of the 8x8 image
    dim: int = 32  # vit: width of the token embeddings (the MLP is twice as wide)
    depth: int = 2  # vit: transformer blocks
    heads: int = 2  # vit: attention heads
    checkpoint: str | None = None  # state dict of this architecture; null = train now
    save_checkpoint: str | None = None  # write the trained weights here (safetensors)
    epochs: int = 40
    batch_size: int = 64
    lr: float = 0.003
    weight_decay: float = 0.0
    seed: int = 0
    test_fraction: float = 0.25  # the split to train on: the digits dataset's, so nothing leaks
    split_seed: int = 0
    cache_dir: str = "~/.cache/modelxray"  # trained weights are kept here (no checkpoint given)
    use_disk_cache: bool = True  # reuse weights trained before on this machine with the same settings
    retrain: bool = False  # train afresh (into cache_dir) even where shipped or cached weights exist
    progress: bool = True  # a progress bar while it trains (the model configs follow the run's progress)

    def validate(self) -> None:
        super().validate()
        self.require_choice("arch", ARCHS)
        self.require_positive("hidden", "channels", "epochs", "batch_size", "lr", "patch_size", "dim", "depth", "heads")
        if self.arch == "vit" and (8 % self.patch_size or self.dim % self.heads):
            raise ConfigError(
                "patch_size",
                f"vit needs a patch size dividing 8 and heads dividing dim, got {self.patch_size}, {self.dim}/{self.heads}",
            )
        self.require_non_negative("weight_decay")
        if self.checkpoint is not None and not Path(self.checkpoint).expanduser().is_file():
            raise ConfigError("checkpoint", f"file not found: {self.checkpoint} (null trains the model now)")

    def _vit(self) -> dict:
        return {"patch_size": self.patch_size, "dim": self.dim, "depth": self.depth, "heads": self.heads}

    def trained_key(self) -> TrainedKey:
        """What names the trained weights: ``digits-<arch>`` and every setting that shapes them."""
        keys = (
            "arch",
            "hidden",
            "channels",
            "epochs",
            "batch_size",
            "lr",
            "weight_decay",
            "seed",
            "test_fraction",
            "split_seed",
        )
        settings = {k: getattr(self, k) for k in keys} | ({"vit": self._vit()} if self.arch == "vit" else {})
        return TrainedKey(f"digits-{self.arch}", settings, CACHE_FORMAT)

    def cache_path(self) -> Path:
        """Where this machine keeps weights it trains with exactly these settings."""
        return self.trained_key().cache_path(self.cache_dir)

    def load(self) -> LoadedModel:
        import torch

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)  # seeded construction (the ViT initialises in its constructor)
            model = build_digits_model(self.arch, self.hidden, self.channels, vit=self._vit())
        if self.checkpoint is not None:
            note, source = self._load_checkpoint(model)
        else:
            note, source = self._load_trained(model), "config"
        if self.save_checkpoint:
            from modelxray.models.trained_cache import save_weights

            save_weights(model.state_dict(), Path(self.save_checkpoint).expanduser())
        info = ModelInfo(
            name=f"digits-{self.arch}",
            source_format=source,
            source_dtype="float32",
            notes=[note],
            file_path=self.checkpoint,
        )
        return LoadedModel(self.place(model), None, info, task="classification", image_shape=DIGIT_SHAPE)

    def _load_checkpoint(self, model: nn.Module) -> tuple[str, str]:
        """``model.checkpoint`` into ``model``: the note and the file's format."""
        from modelxray.models.file import detect_format
        from modelxray.models.readers import read_state_dict

        path = Path(self.checkpoint).expanduser()
        fmt = detect_format(path)
        if fmt not in ("safetensors", "state_dict"):
            raise ConfigError("model.checkpoint", f"{path} is a {fmt}; give a state dict (.pt) or .safetensors")
        state = read_state_dict(path, fmt, allow_unsafe_pickle=False)
        fix = "set model.arch / hidden / channels to the saved ones"
        try:
            missing, unexpected = model.load_state_dict(state, strict=False)
        except RuntimeError as exc:  # shape mismatch
            detail = next((ln.strip() for ln in str(exc).splitlines() if "size mismatch" in ln), str(exc)[:200])
            raise ConfigError("model.checkpoint", f"{path} does not match arch={self.arch}: {detail}; {fix}") from None
        if missing or unexpected:
            raise ConfigError(
                "model.checkpoint",
                f"{path} does not match arch={self.arch} (missing {missing[:3]}, unexpected {unexpected[:3]}); {fix}",
            )
        return f"weights from {path}", fmt

    def _load_trained(self, model: nn.Module) -> str:
        """The weights shipped or cached for these settings into ``model``, else ``model`` trained
        now (and cached on this machine); returns the note saying which."""
        from modelxray.models.trained_cache import about, load_trained_weights

        def train() -> str:
            seconds, train_acc = self._train(model)
            return (
                f"trained now: {self.epochs} epochs of Adam (lr {self.lr}, seed {self.seed}) on the train split, "
                f"{seconds:.1f} s, train accuracy {train_acc:.3f}"
            )

        how = f"{self.epochs} epochs of Adam, seed {self.seed}"
        what = f"{self.epochs} epochs of Adam on the digits train split, {about(self._about_seconds())} on one core"
        return load_trained_weights(self, model, how, what, train)

    def _about_seconds(self) -> float:
        """The training's expected time on one core of a laptop-class CPU: the default's measured
        seconds per epoch for this architecture, times the epochs."""
        return SECONDS_PER_EPOCH[self.arch] * self.epochs

    def _train(self, model: nn.Module) -> tuple[float, float]:
        import torch
        import torch.nn.functional as F

        from modelxray.core.progress import bar

        data = load_digits_split(self.test_fraction, self.split_seed)
        start = time.perf_counter()
        gen = torch.Generator().manual_seed(self.seed)
        if self.arch != "vit":  # the ViT keeps Hugging Face's seeded initialisation from load()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed)
                for m in model.modules():  # seeded init, independent of the global RNG state
                    if hasattr(m, "reset_parameters"):
                        m.reset_parameters()
        opt = torch.optim.Adam(model.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        x, y = data.x_train, data.y_train
        model.train()
        batches = -(-len(y) // self.batch_size)
        with (
            torch.enable_grad(),
            bar(total=self.epochs * batches, desc=f"training digits-{self.arch}", enabled=self.progress) as steps,
        ):
            for _ in range(self.epochs):
                order = torch.randperm(len(y), generator=gen)
                for i in range(0, len(y), self.batch_size):
                    idx = order[i : i + self.batch_size]
                    loss = F.cross_entropy(model(x[idx]), y[idx])
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    steps.update(1)
        model.eval()
        with torch.inference_mode():
            acc = float((model(x).argmax(-1) == y).float().mean())
        return time.perf_counter() - start, acc
