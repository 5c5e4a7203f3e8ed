"""CLIP-style dual encoders (CLIPModel, SiglipModel) as zero-shot ``pixels -> class logits`` classifiers.

A dual encoder has no classification head: it scores an image against text. Given the class names
of a dataset and a prompt template (``"a photo of the digit {label}"``), ``ZeroShotClassifier`` turns
it into a plain classifier, so every classifier analyzer (accuracy, pixel attacks, per-module time,
quantization) runs on it unchanged and its accuracy is zero-shot accuracy.

The class prompts depend on the dataset, so loading gives an *unbound* classifier (the dual encoder,
its image normalisation and input shape); the run binds it to the dataset's classes once the data
is known (``for_classes``, called from ``app``). Both ``model=hf`` (a CLIP or SigLIP directory) and
``model=digits_clip`` go through this one path.

Prompts are tokenized once, when bound; the text tower itself runs in every forward (see
``ZeroShotClassifier``), so quantizing or perturbing the text tower shows in the logits.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from modelxray.core.errors import ConfigError

# model_type -> how its text is padded and pooled, and how its logits are scaled
FAMILIES = {"clip": "clip", "metaclip_2": "clip", "siglip": "siglip"}
DEFAULT_TEMPLATE = "a photo of a {label}."
BYTE_VOCAB = 257  # modelxray's byte tokenizer: 256 bytes + one end-of-text id


def family_of(config: Any, name: str) -> str:
    """``clip`` or ``siglip`` for the dual encoders zero-shot classification supports, else a one-line error."""
    model_type = getattr(config, "model_type", "")
    if model_type not in FAMILIES:
        raise ConfigError(
            "model",
            f"{name} is a {model_type or 'unknown'} vision-language model; zero-shot classification supports "
            f"the CLIP and SigLIP dual encoders ({', '.join(FAMILIES)})",
        )
    return FAMILIES[model_type]


def check_template(template: str | None, key: str) -> None:
    """A prompt template must name where the class goes: ``{label}``."""
    if template is not None and "{label}" not in template:
        raise ConfigError(key, f"must contain {{label}} where the class name goes, got {template!r}")


def prompts_of(class_names: list[str], template: str) -> list[str]:
    """One prompt per class: ``{label}`` replaced by the class name (underscores read as spaces)."""
    return [template.replace("{label}", str(n).replace("_", " ")) for n in class_names]


def _is_byte(tokenizer: Any) -> bool:
    return getattr(tokenizer, "name_or_path", None) == "byte" and hasattr(tokenizer, "identity")


def _byte_ids(tokenizer: Any, prompts: list[str], text_config: Any, family: str) -> tuple[list[list[int]], int]:
    """Byte ids of each prompt ending in the id the text tower pools on, and the pad id."""
    vocab = int(getattr(text_config, "vocab_size", 0))
    eos = getattr(text_config, "eos_token_id", None)
    pad = getattr(text_config, "pad_token_id", None)
    if family == "clip" and eos == 2:
        eos = tokenizer.eos_token_id  # legacy CLIP configs pool at argmax(input_ids): the largest id
    elif not isinstance(eos, int) or not 0 <= eos < vocab:
        if family == "clip":  # CLIP pools at the first eos_token_id: it must be an id of the vocabulary
            raise ConfigError(
                "model.tokenizer",
                f"the text config's eos_token_id ({eos}) is outside its vocabulary ({vocab}), so the byte "
                "tokenizer cannot end a prompt where the text tower pools; set model.tokenizer to its tokenizer",
            )
        eos = tokenizer.eos_token_id  # SigLIP pools at the last position, whatever id is there
    pad = pad if isinstance(pad, int) and 0 <= pad < vocab else eos
    ids = [tokenizer.encode(p) + [eos] for p in prompts]
    if eos < 256 and any(eos in row[:-1] for row in ids):
        raise ConfigError("model.prompt_template", f"a prompt holds the byte {eos}, the text tower's end-of-text id")
    return ids, pad


def encode_prompts(
    tokenizer: Any, prompts: list[str], text_config: Any, family: str
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(input_ids, attention_mask)`` of the prompts, padded the way the text tower was trained.

    CLIP: right-padded to the longest prompt with an attention mask; the text tower pools at the
    end-of-text token (the first ``eos_token_id``, or the largest id for configs whose
    ``eos_token_id`` is 2). SigLIP: padded to ``max_position_embeddings`` without a mask; the tower
    pools at the last position. The byte tokenizer ends each prompt with the id the tower pools on."""
    max_len = int(getattr(text_config, "max_position_embeddings", 77))
    if _is_byte(tokenizer):
        ids, pad = _byte_ids(tokenizer, prompts, text_config, family)
        longest = max(len(r) for r in ids)
        if longest > max_len:
            raise ConfigError(
                "model.prompt_template",
                f"the prompt {prompts[max(range(len(ids)), key=lambda i: len(ids[i]))]!r} is {longest} tokens; "
                f"the text tower takes {max_len}: use a shorter template",
            )
        width = max_len if family == "siglip" else longest
        input_ids = torch.tensor([r + [pad] * (width - len(r)) for r in ids], dtype=torch.long)
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in ids], dtype=torch.long)
        return input_ids, (None if family == "siglip" else mask)
    padding = "max_length" if family == "siglip" else True
    enc = tokenizer(prompts, padding=padding, truncation=True, max_length=max_len, return_tensors="pt")
    mask = enc.get("attention_mask") if family == "clip" else None
    return enc["input_ids"].long(), (mask.long() if mask is not None else None)


def _features(out: Any) -> torch.Tensor:
    """``get_*_features`` returns a tensor (transformers 4) or an output whose ``pooler_output`` is the
    projected embedding (transformers 5)."""
    return out if isinstance(out, torch.Tensor) else out.pooler_output


class ZeroShotClassifier(nn.Module):
    """A dual encoder as a classifier: ``pixels x in [0, 1] -> logits over the bound classes``.

    ``forward(x)``: ``(x - mean) / std`` (the image processor's normalisation) -> image embeddings
    (``get_image_features``); the class prompts' text embeddings (``get_text_features``) computed
    *in the same forward* from the model's own text tower, so quantization of, or weight noise in,
    the text tower is reflected in the logits (and in every timing: each call runs both towers on
    the ``n_classes`` prompts); both L2-normalised; ``logits = logit_scale.exp() * image @ text.T``
    (SigLIP adds its ``logit_bias``). Accuracy over these logits is zero-shot accuracy.

    Inputs are (N, C, H, W) or flat (N, C*H*W) pixels. Built unbound (no classes) by the model
    source; ``for_classes`` gives the classifier of a dataset's classes."""

    def __init__(
        self,
        net: nn.Module,
        mean: list[float],
        std: list[float],
        image_shape: tuple[int, int, int],
        family: str,
        prompt_template: str | None = None,
    ):
        super().__init__()
        self.net = net
        self.family = family
        self.image_shape = tuple(image_shape)  # (channels, height, width) the vision tower expects
        self.prompt_template = prompt_template  # model.prompt_template; None = the dataset's
        self._mean, self._std = list(mean), list(std)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(-1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(-1, 1, 1), persistent=False)
        self.register_buffer("input_ids", None, persistent=False)
        self.register_buffer("attention_mask", None, persistent=False)
        self.class_names: list[str] | None = None
        self.template: str | None = None
        self.prompts: list[str] | None = None

    @property
    def config(self):
        return self.net.config

    def for_classes(self, class_names: list[str], tokenizer: Any, default_template: str | None = None):
        """The classifier of ``class_names``: prompts from ``model.prompt_template``, else
        ``default_template`` (the dataset's), else ``a photo of a {label}.``; the weights are shared."""
        template = self.prompt_template or default_template or DEFAULT_TEMPLATE
        check_template(template, "model.prompt_template" if self.prompt_template else "dataset")
        prompts = prompts_of(class_names, template)
        input_ids, mask = encode_prompts(tokenizer, prompts, self.net.config.text_config, self.family)
        bound = ZeroShotClassifier(self.net, self._mean, self._std, self.image_shape, self.family, self.prompt_template)
        device = next(self.net.parameters()).device
        bound.mean, bound.std = self.mean.to(device), self.std.to(device)
        bound.input_ids = input_ids.to(device)
        bound.attention_mask = mask.to(device) if mask is not None else None
        bound.class_names, bound.template, bound.prompts = list(class_names), template, prompts
        return bound.train(self.training)

    def text_embeddings(self) -> torch.Tensor:
        """L2-normalised embeddings of the class prompts, (n_classes, dim), from the text tower now."""
        if self.input_ids is None:
            raise RuntimeError("this zero-shot classifier has no classes yet: call for_classes(class_names, tokenizer)")
        kwargs = {} if self.attention_mask is None else {"attention_mask": self.attention_mask}
        text = _features(self.net.get_text_features(input_ids=self.input_ids, **kwargs))
        return text / text.norm(p=2, dim=-1, keepdim=True)

    def image_embeddings(self, x: torch.Tensor) -> torch.Tensor:
        """L2-normalised image embeddings of pixels ``x`` in [0, 1], (N, dim)."""
        if x.dim() == 2:
            x = x.reshape(-1, *self.image_shape)
        x = (x - self.mean.to(x)) / self.std.to(x)
        image = _features(self.net.get_image_features(pixel_values=x))
        return image / image.norm(p=2, dim=-1, keepdim=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        text = self.text_embeddings()
        image = self.image_embeddings(x)
        logits = image @ text.t().to(image) * self.net.logit_scale.exp().to(image)
        if self.family == "siglip":
            logits = logits + self.net.logit_bias.to(image)
        return logits

    def extra_repr(self) -> str:
        return f"family={self.family}, classes={len(self.class_names or [])}, template={self.template!r}"


def zero_shot_notes(classifier: ZeroShotClassifier) -> list[str]:
    """What a report says about a bound classifier's scores."""
    return [
        f"Zero-shot classifier: each class is scored by the prompt {classifier.template!r} "
        f"(e.g. {classifier.prompts[0]!r}) through the model's text tower; accuracy is zero-shot accuracy."
    ]
