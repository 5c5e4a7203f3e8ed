"""Evaluate perturbations of an encoder, a seq2seq model or a text classifier on its task's windows.

The scoring is the causal LM harness's (one ``Reference`` pass; loss, perplexity or accuracy, top-1
agreement and KL at the scored positions, paired loss change), since every text kind's windows are
named inputs with aligned targets. What differs is where a perturbation lands:

* embedding attacks (FGSM, PGD) shift the token embeddings the encoder reads: a seq2seq model's
  source, never its decoder's inputs (the two share one embedding table);
* token substitution replaces a share of the text the model reads (a masked LM's unmasked tokens,
  a seq2seq model's source, a classifier's text; never special tokens or padding) by random tokens;
  the targets stay, except a token classifier's label of a replaced token, which is not scored.

Token dropout (deleting tokens and re-cutting windows) is a causal LM's family: deleting tokens
would move every aligned target of an encoder, so it is not run here."""

from __future__ import annotations

import torch
from torch import nn

from modelxray.kinds.base import Kind
from modelxray.kinds.seq2seq_lm import Seq2SeqLM
from modelxray.metrics.windows import IGNORE, NamedTensors, Window
from modelxray.perturb.lm_harness import LMHarness


def substitute_text(
    window: Window, rate: float, vocab_size: int, protected: torch.Tensor, generator: torch.Generator, kind: Kind
) -> Window:
    """``window`` with a ``rate`` share of its source tokens (``input_ids`` under the attention mask,
    not in ``protected``: special and mask tokens) replaced by random ordinary tokens (a draw that
    lands on a protected token leaves the token as it was). ``kind``: the model's kind;
    a token classifier's label of a replaced token is not scored."""
    inputs = window.inputs
    ids = inputs["input_ids"]
    mask = inputs.get("attention_mask", torch.ones_like(ids)).bool()
    replaceable = mask & ~torch.isin(ids, protected)
    replaced = replaceable & (torch.rand(ids.shape, generator=generator) < rate)
    low = int(protected.max()) + 1 if protected.numel() and int(protected.max()) < vocab_size // 2 else 0
    random_ids = torch.randint(low, vocab_size, ids.shape, generator=generator)
    replaced &= ~torch.isin(random_ids, protected)  # a draw of a special token (an image's) leaves the token
    source = NamedTensors({**inputs, "input_ids": torch.where(replaced, random_ids, ids)})
    source.primary = inputs.primary
    targets = window.targets
    if kind.labels_every_token():
        targets = targets.masked_fill(replaced, IGNORE)
    return Window(source, targets)


class TextTaskHarness(LMHarness):
    dropout_family = None

    def __init__(
        self,
        model: nn.Module,
        windows: list[Window],
        kind: Kind,
        tokenizer,
        batch_size: int,
        kl_windows: int,
        progress: bool = True,
        attack_batch_size: int = 1,
    ):
        super().__init__(model, windows, batch_size, kl_windows, progress, attack_batch_size)
        self.kind = kind
        self.quality = kind.quality_figure()
        self.vocab_size = len(tokenizer)
        self.protected = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)
        encoder = model.get_encoder() if isinstance(kind, Seq2SeqLM) and hasattr(model, "get_encoder") else None
        self.shift_within = encoder
        if encoder is not None:  # the encoder's own embedding module (transformers may give each stack one)
            self._embedding = encoder.get_input_embeddings()

    def token_shape(self, inputs) -> tuple[int, ...]:
        return tuple(inputs["input_ids"].shape) if isinstance(inputs, NamedTensors) else tuple(inputs.shape)

    def perturb_inputs(self, family: str, rate: float, generator: torch.Generator, desc: str) -> dict[str, float]:
        return self.token_substitution(rate, generator, desc)

    def token_substitution(self, rate: float, generator: torch.Generator, desc: str) -> dict[str, float]:
        """Metrics at the same scored positions as the clean run (a token classifier: those whose
        token was not replaced), compared with it position by position."""
        from modelxray.core.progress import bar
        from modelxray.measure.scoring import forward_logits
        from modelxray.metrics.windows import batched

        windows = [
            substitute_text(w, rate, self.vocab_size, self.protected, generator, self.kind) for w in self.windows
        ]
        comp = self.ref.comparison()
        with torch.inference_mode():
            for i, (inputs, targets) in enumerate(
                bar(list(batched(windows, self.batch_size)), desc=desc, enabled=self.progress)
            ):
                comp.add(i, forward_logits(self.model, inputs.to(self.ref.device)), targets.to(self.ref.device))
        return comp.result()
