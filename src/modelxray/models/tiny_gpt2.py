"""A small GPT-2 built from a config with a fixed seed: the fast, offline model of the tests."""

from __future__ import annotations

from dataclasses import dataclass

from modelxray.core.subject import LoadedModel, ModelInfo
from modelxray.models.base import Declared, ModelSource
from modelxray.models.tokenizers import load_tokenizer, validate_tokenizer_spec


@dataclass
class TinyGPT2Source(ModelSource):
    n_layer: int = 2
    n_embd: int = 64
    n_head: int = 4
    n_positions: int = 512
    seed: int = 0
    tokenizer: str = "byte"
    attn_implementation: str = "eager"

    def validate(self) -> None:
        super().validate()
        self.require_positive("n_layer", "n_embd", "n_head", "n_positions")
        if self.n_embd % self.n_head:
            from modelxray.core.errors import ConfigError

            raise ConfigError("n_head", f"must divide n_embd ({self.n_embd}); got {self.n_head}")
        self.require_choice("attn_implementation", ["eager", "sdpa"])
        validate_tokenizer_spec(self.tokenizer, "tokenizer")

    def declared(self) -> Declared:
        return Declared("causal_lm", self.n_positions, "model.n_positions")

    def tokenizer_alone(self):
        return load_tokenizer(self.tokenizer, "model.tokenizer")

    def load(self) -> LoadedModel:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel

        tokenizer = load_tokenizer(self.tokenizer, "model.tokenizer")
        config = GPT2Config(
            vocab_size=len(tokenizer),
            n_positions=self.n_positions,
            n_embd=self.n_embd,
            n_layer=self.n_layer,
            n_head=self.n_head,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        config._attn_implementation = self.attn_implementation
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            model = GPT2LMHeadModel(config)
        info = ModelInfo(
            name=f"tiny-gpt2-L{self.n_layer}-d{self.n_embd}",
            source_format="config",
            source_dtype=f"float32 (random init, seed {self.seed})",
        )
        return LoadedModel(self.place(model), tokenizer, info)
