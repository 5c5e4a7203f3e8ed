"""A small CLIP trained on scikit-learn's digits: a real vision-language model, offline.

A Hugging Face ``CLIPModel`` (vision: 8x8 grey images in 2x2-pixel patches; text: modelxray's byte
tokenizer; both towers 2 blocks of width 32, joint space 32) trained with CLIP's loss where the
text side is the ten class prompts: each batch of train images is scored against "a photo of the
digit 0" ... "a photo of the digit 9" and the cross-entropy over those similarities is minimised.
The template varies from step to step (``train_templates``), so the text tower learns the label
rather than one sentence. Adam, seeded, on the train part of the split the ``digits`` dataset
evaluates. The default's weights ship with modelxray; other settings, or ``retrain=true``, train
here (about 30 s on one core) and are cached on disk keyed by every setting that shapes the weights
(as ``digits_vit``).

It loads as the same unbound ``ZeroShotClassifier`` as ``model=hf`` on a CLIP directory, and the
run binds it to the dataset's class names: analyzers see one kind, and its accuracy is zero-shot
accuracy. ``save_pretrained`` writes a Hugging Face directory that ``model=hf`` loads the same way.
torch is imported when the model is built, not with the config."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from modelxray.core.errors import ConfigError
from modelxray.core.subject import LoadedModel, ModelInfo
from modelxray.data.digits import load_digits_split
from modelxray.models.base import ModelSource
from modelxray.models.trained_cache import TrainedKey

if TYPE_CHECKING:
    from torch import nn


CACHE_FORMAT = 1  # bump when training changes, so stale cached weights are not reused
SECONDS_PER_EPOCH = 0.5  # measured on one thread (the announcement's estimate, not a limit)
BYTE_EOS = 256  # the byte tokenizer's end-of-text id: the text tower pools there
TRAIN_TEMPLATES = ("a photo of the digit {label}", "a handwritten {label}", "the number {label}")


def build_digits_clip(patch_size: int = 2, dim: int = 32, depth: int = 2, heads: int = 2, projection_dim: int = 32):
    """A ``CLIPModel`` for 8x8 grey images and byte-tokenized prompts (vocabulary 257, end-of-text 256)."""
    from transformers import CLIPConfig, CLIPModel

    tower = dict(hidden_size=dim, intermediate_size=2 * dim, num_hidden_layers=depth, num_attention_heads=heads)
    config = CLIPConfig(
        text_config={
            **tower,
            "vocab_size": 257,
            "max_position_embeddings": 64,
            "bos_token_id": BYTE_EOS,
            "eos_token_id": BYTE_EOS,
            "pad_token_id": BYTE_EOS,
        },
        vision_config={**tower, "image_size": 8, "patch_size": patch_size, "num_channels": 1},
        projection_dim=projection_dim,
    )
    return CLIPModel(config)


@dataclass
class DigitsCLIPSource(ModelSource):
    kind_of_source: ClassVar[str | None] = "vision_language"
    patch_size: int = 2  # vision: square patches of the 8x8 image
    dim: int = 32  # width of both towers (their MLPs are twice as wide)
    depth: int = 2  # transformer blocks of each tower
    heads: int = 2  # attention heads of each tower
    projection_dim: int = 32  # the joint image-text space
    train_templates: list[str] = field(default_factory=lambda: list(TRAIN_TEMPLATES))  # one per step, in turn
    prompt_template: str | None = None  # evaluation prompt with {label}; null = the dataset's
    epochs: int = 60
    batch_size: int = 64
    lr: float = 0.001
    weight_decay: float = 0.0
    seed: int = 0
    test_fraction: float = 0.25  # the split to train on: the digits dataset's, so nothing leaks
    split_seed: int = 0
    cache_dir: str = "~/.cache/modelxray"  # trained weights are kept here
    use_disk_cache: bool = True  # reuse weights trained before on this machine with the same settings
    retrain: bool = False  # train afresh (into cache_dir) even where shipped or cached weights exist
    save_pretrained: str | None = None  # also write a Hugging Face directory here (model=hf loads it)
    progress: bool = True  # a progress bar while it trains (the model configs follow the run's progress)

    def validate(self) -> None:
        super().validate()
        self.require_positive("patch_size", "dim", "depth", "heads", "projection_dim", "epochs", "batch_size", "lr")
        self.require_non_negative("weight_decay")
        if 8 % self.patch_size or self.dim % self.heads:
            raise ConfigError(
                "patch_size",
                f"needs a patch size dividing 8 and heads dividing dim, got {self.patch_size}, {self.dim}/{self.heads}",
            )
        if not self.train_templates:
            raise ConfigError("train_templates", "needs at least one prompt template with {label}")
        for t in self.train_templates:
            if "{label}" not in t:
                raise ConfigError("train_templates", f"every template must contain {{label}}, got {t!r}")
        if self.prompt_template is not None and "{label}" not in self.prompt_template:
            raise ConfigError(
                "prompt_template", f"must contain {{label}} where the class name goes, got {self.prompt_template!r}"
            )

    def _arch(self) -> dict[str, int]:
        return {
            "patch_size": self.patch_size,
            "dim": self.dim,
            "depth": self.depth,
            "heads": self.heads,
            "projection_dim": self.projection_dim,
        }

    def trained_key(self) -> TrainedKey:
        """What names the trained weights: ``digits-clip`` and every setting that shapes them."""
        keys = ("train_templates", "epochs", "batch_size", "lr", "weight_decay", "seed", "test_fraction", "split_seed")
        return TrainedKey("digits-clip", {k: getattr(self, k) for k in keys} | self._arch(), CACHE_FORMAT)

    def cache_path(self) -> Path:
        """Where this machine keeps weights it trains with exactly these settings."""
        return self.trained_key().cache_path(self.cache_dir)

    def load(self) -> LoadedModel:
        import torch

        from modelxray.models.tokenizers import load_tokenizer
        from modelxray.models.vision_language import ZeroShotClassifier

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)  # seeded construction (Hugging Face initialises in the constructor)
            net = build_digits_clip(**self._arch())
        tokenizer = load_tokenizer("byte")
        model = ZeroShotClassifier(net, [0.0], [1.0], (1, 8, 8), "clip", self.prompt_template)
        note = self._load_trained(model, tokenizer)
        if self.save_pretrained:
            self._save_pretrained(net)
        info = ModelInfo(name="digits-clip", source_format="config", source_dtype="float32", notes=[note])
        return LoadedModel(
            self.place(model), tokenizer, info, task="classification", image_shape=(1, 8, 8), kind=self.kind_of_source
        )

    def _load_trained(self, model: Any, tokenizer: Any) -> str:
        """The weights shipped or cached for these settings into ``model.net``, else trained now
        (and cached on this machine); returns the note saying which."""
        from modelxray.models.trained_cache import about, load_trained_weights

        def train() -> str:
            seconds, train_acc = self._train(model, tokenizer)
            return (
                f"trained now: {self.epochs} epochs of Adam (lr {self.lr}, seed {self.seed}) on the train split "
                f"against the class prompts of {len(self.train_templates)} templates, {seconds:.1f} s, "
                f"zero-shot train accuracy {train_acc:.3f}"
            )

        how = f"{self.epochs} epochs of Adam, seed {self.seed}"
        what = (
            f"{self.epochs} epochs of Adam on the digits train split against its class prompts, "
            f"{about(SECONDS_PER_EPOCH * self.epochs)} on one core"
        )
        return load_trained_weights(self, model.net, how, what, train)

    def _save_pretrained(self, net: nn.Module) -> None:
        import json

        out = Path(self.save_pretrained).expanduser()
        net.save_pretrained(out)
        prep = {"image_mean": [0.0], "image_std": [1.0], "size": {"height": 8, "width": 8}}
        (out / "preprocessor_config.json").write_text(json.dumps(prep))

    def _train(self, model: Any, tokenizer: Any) -> tuple[float, float]:
        """CLIP's loss with the ten class prompts as the text side; the template changes every step."""
        import math

        import torch
        import torch.nn.functional as F

        data = load_digits_split(self.test_fraction, self.split_seed)
        names = data.meta["class_names"]
        start = time.perf_counter()
        gen = torch.Generator().manual_seed(self.seed)
        from modelxray.core.progress import bar
        from modelxray.models.vision_language import ZeroShotClassifier

        net = model.net
        plain = ZeroShotClassifier(net, [0.0], [1.0], (1, 8, 8), "clip")  # no prompt_template: each template's own
        heads = [plain.for_classes(names, tokenizer, t) for t in self.train_templates]  # share the weights
        opt = torch.optim.Adam(net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        x, y = data.x_train, data.y_train
        step = 0
        net.train()
        batches = -(-len(y) // self.batch_size)
        total = self.epochs * batches
        with torch.enable_grad(), bar(total=total, desc="training digits-clip", enabled=self.progress) as steps:
            for _ in range(self.epochs):
                order = torch.randperm(len(y), generator=gen)
                for i in range(0, len(y), self.batch_size):
                    idx = order[i : i + self.batch_size]
                    loss = F.cross_entropy(heads[step % len(heads)](x[idx]), y[idx])
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    with torch.no_grad():
                        net.logit_scale.clamp_(0, math.log(100))  # CLIP's cap on the temperature
                    step += 1
                    steps.update(1)
        net.eval()
        with torch.inference_mode():
            acc = float((heads[0](x).argmax(-1) == y).float().mean())
        return time.perf_counter() - start, acc
