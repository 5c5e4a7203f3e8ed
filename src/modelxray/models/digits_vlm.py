"""A small generative vision-language model trained here to answer what digit an image shows: a
Hugging Face LLaVA (a CLIP vision tower on 32x32 images in 8-pixel patches, a two-layer projector,
a small Llama language model) with the byte-level BPE of the Python docs and an ``<image>`` token.

It is trained on the digits' train split, each image asked "What digit is this?" with the loss on
the answer's tokens only (the evaluation's questions, ``data/image_questions.py``, are asked about
the test split, so it is scored on digits it never saw). Seeded AdamW. The default's model directory
(config, weights, processor) ships with modelxray; other settings, or ``retrain=true``, train here
(about a minute on one core, with a progress bar) and keep it under ``cache_dir`` keyed by every
setting that shapes it. Either loads like ``model=hf`` on that directory."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, ClassVar

from modelxray.core.errors import ConfigError
from modelxray.models.trained_source import TrainedDirectorySource

IMAGE_SIDE = 32  # the 8x8 digits scaled up 4x: 16 patches of 8 pixels


@dataclass
class DigitsVLMSource(TrainedDirectorySource):
    kind_of_source: ClassVar[str | None] = "image_text_to_text"
    stem: ClassVar[str] = "digits-vlm"
    seconds_per_step: ClassVar[float] = 0.075  # measured on one thread: the announced estimate, not a limit
    cache_format: ClassVar[int] = 1  # bump when training changes, so stale cached models are not reused

    dim: int = 64  # width of both towers
    depth: int = 2  # blocks of each tower
    heads: int = 2
    vocab_size: int = 1000  # byte-level BPE trained on the shipped text, plus <image>
    steps: int = 800  # optimizer steps
    batch_size: int = 32
    lr: float = 0.002  # peak learning rate (5% warm-up, then linear decay)
    weight_decay: float = 0.01

    def validate(self) -> None:
        super().validate()
        self.require_positive("dim", "depth", "heads", "vocab_size", "steps", "batch_size", "lr")
        self.require_non_negative("weight_decay")
        if self.dim % self.heads:
            raise ConfigError("heads", f"must divide dim, got dim {self.dim} and {self.heads} heads")

    def settings(self) -> dict[str, Any]:
        keys = ("dim", "depth", "heads", "vocab_size", "steps", "batch_size", "lr", "weight_decay", "seed")
        return {k: getattr(self, k) for k in (*keys, "test_fraction", "split_seed")}

    def trained_on(self) -> str:
        return "answering what digit each image of the digits train split shows"

    def build(self):
        """The untrained model and its processor (seeded by the caller)."""
        from transformers import (
            CLIPImageProcessor,
            CLIPVisionConfig,
            LlamaConfig,
            LlavaConfig,
            LlavaForConditionalGeneration,
            LlavaProcessor,
        )

        from modelxray.models.pydoc_text import shipped_text
        from modelxray.models.text_tokenizer import train_tokenizer

        tok = train_tokenizer(shipped_text(), self.vocab_size, "bart")
        tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
        tower = dict(hidden_size=self.dim, intermediate_size=2 * self.dim, num_hidden_layers=self.depth)
        vision = CLIPVisionConfig(**tower, num_attention_heads=self.heads, image_size=IMAGE_SIDE, patch_size=8)
        text = LlamaConfig(
            **tower,
            vocab_size=len(tok),
            num_attention_heads=self.heads,
            num_key_value_heads=self.heads,
            max_position_embeddings=256,
            pad_token_id=tok.pad_token_id,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
        )
        config = LlavaConfig(
            vision_config=vision,
            text_config=text,
            image_token_id=tok.convert_tokens_to_ids("<image>"),
            vision_feature_layer=-1,
        )
        images = CLIPImageProcessor(
            size={"shortest_edge": IMAGE_SIDE},
            crop_size={"height": IMAGE_SIDE, "width": IMAGE_SIDE},
            image_mean=[0.5] * 3,
            image_std=[0.5] * 3,
        )
        processor = LlavaProcessor(
            image_processor=images,
            tokenizer=tok,
            patch_size=8,
            vision_feature_select_strategy="default",
            num_additional_image_tokens=1,
        )
        return LlavaForConditionalGeneration(config), processor

    def _train(self, net: Any, processor: Any) -> float:
        """Cross-entropy on the answer tokens of batches of train-split questions."""
        import torch.nn.functional as F

        from modelxray.data.digits import load_digits_split
        from modelxray.data.image_questions import QUESTION, answer_windows, prompt_for, to_rgb
        from modelxray.metrics.windows import IGNORE, batched
        from modelxray.models.trained_cache import optimize

        split = load_digits_split(self.test_fraction, self.split_seed)
        images = [to_rgb(x.view(8, 8), IMAGE_SIDE) for x in split.x_train]
        prompt = prompt_for(processor, QUESTION)
        answers = [f" {int(y)}" for y in split.y_train]
        data = answer_windows(processor, images, [prompt] * len(images), answers, "digits", "")
        groups: dict[tuple, list] = {}
        for w in data.windows:
            groups.setdefault(tuple(w.inputs["input_ids"].shape), []).append(w)
        pools = list(groups.values())
        weights = [len(p) for p in pools]
        rng = random.Random(self.seed)

        def loss_of(_step: int):
            pool = rng.choices(pools, weights)[0]
            chosen = [pool[rng.randrange(len(pool))] for _ in range(self.batch_size)]
            inputs, targets = next(batched(chosen, len(chosen)))
            logits = net(**inputs).logits
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE)

        desc = "training digits-vlm"
        return optimize(net, loss_of, self.steps, self.lr, self.weight_decay, desc, self.progress)
