"""Small text models trained here on the Python documentation that ships with Python
(``pydoc_data.topics``), so an encoder and a sequence-to-sequence model with real quality, and real
degradation under ``quant=``, are one command away offline:

* ``arch=bart``: a BART that restores the words dropped from a passage, the task the seq2seq
  evaluation of a text dataset scores (denoising pairs, ``data.text_tasks.denoising_pairs``) and
  BART's own pre-training task. ``arch=t5`` trains a T5 on the same task; it learns to copy more
  slowly (its cross-attention has no positions to align by), so it needs many more steps;
* ``arch=bert``: a BERT masked language model (15% of tokens hidden, 80/10/10 as BERT was trained).

Both train on the text the evaluation does not use: the T5 never sees the passages the evaluation
draws (the dataset's ``examples``, ``drop_rate`` and ``task_seed`` pick them, as in the evaluation),
the BERT never sees the first ``examples x seq_len`` tokens, where the masked windows come from.
Their tokenizers (WordPiece, Unigram) are trained on the whole text: a vocabulary, no labels.
Seeded AdamW. The defaults' model directories (config, weights, tokenizer) ship with modelxray, so
nothing trains on first use; other settings, or ``retrain=true``, train here (BART about 4 minutes,
BERT about 2 on one core, with a progress bar) and keep the directory under ``cache_dir`` keyed by
every setting that shapes it. Either loads like ``model=hf`` on that directory."""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelxray.core.errors import ConfigError
from modelxray.core.subject import LoadedModel
from modelxray.models.base import ModelSource
from modelxray.models.trained_cache import TrainedKey

ARCHS = ("bart", "t5", "bert")
CACHE_FORMAT = 1  # bump when training changes, so stale cached models are not reused
PASSAGE_WORDS = 24  # as data.text_tasks.denoising_pairs: the evaluated passages are this long
log = logging.getLogger(__name__)


def shipped_text() -> str:
    """The Python documentation topics in sorted key order, as ``dataset=pydoc_topics`` reads them."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))


@dataclass
class PydocTextSource(ModelSource):
    arch: str = "bart"  # bart | t5: restore dropped words (seq2seq) | bert: fills masked tokens (masked LM)
    vocab_size: int = 2000  # tokenizer trained on the shipped text (special tokens included)
    dim: int = 128  # hidden size
    depth: int = 2  # blocks of each stack (T5: encoder and decoder)
    heads: int = 4
    ffn: int = 256  # feed-forward width
    max_len: int = 64  # training sequence length in tokens
    steps: int = 2000  # optimizer steps
    batch_size: int = 32
    lr: float = 0.0015  # peak learning rate (5% warm-up, then linear decay)
    weight_decay: float = 0.01
    seed: int = 0
    mask_rate: float = 0.15  # bert: share of tokens hidden in training
    drop_rate: float = 0.15  # bart, t5: share of words dropped from a training source (and the evaluated ones)
    held_out_examples: int = 64  # the evaluation's examples (dataset.examples): never trained on
    held_out_seq_len: int = 256  # bert: the evaluation's window length (dataset.seq_len)
    held_out_seed: int = 0  # bart, t5: the evaluation's seed (dataset.task_seed), which picks its passages
    cache_dir: str = "~/.cache/modelxray"  # trained model directories are kept here
    use_disk_cache: bool = True  # reuse a model trained before on this machine with the same settings
    retrain: bool = False  # train afresh (into cache_dir) even where shipped or cached weights exist
    save_pretrained: str | None = None  # also copy the Hugging Face directory here (model=hf loads it)
    progress: bool = True  # a progress bar while training

    def validate(self) -> None:
        super().validate()
        self.require_choice("arch", ARCHS)
        self.require_positive("vocab_size", "dim", "depth", "heads", "ffn", "max_len", "steps", "batch_size", "lr")
        self.require_positive("held_out_examples", "held_out_seq_len")
        self.require_non_negative("weight_decay")
        if self.dim % self.heads:
            raise ConfigError("heads", f"must divide dim, got dim {self.dim} and {self.heads} heads")
        if self.vocab_size < 100:
            raise ConfigError("vocab_size", f"must be at least 100 tokens, got {self.vocab_size}")
        for key in ("mask_rate", "drop_rate"):
            if not 0 < getattr(self, key) < 1:
                raise ConfigError(key, f"must be between 0 and 1, got {getattr(self, key)!r}")

    @property
    def model_name(self) -> str:
        return f"pydoc-{self.arch}"

    def settings(self) -> dict[str, Any]:
        """Everything that shapes the weights (the cache key)."""
        keys = ["arch", "vocab_size", "dim", "depth", "heads", "ffn", "max_len", "steps", "batch_size", "lr"]
        keys += ["weight_decay", "seed", "held_out_examples"]
        keys += ["mask_rate", "held_out_seq_len"] if self.arch == "bert" else ["drop_rate", "held_out_seed"]
        return {k: getattr(self, k) for k in keys}

    @property
    def seconds_per_step(self) -> float:
        """A training step's measured seconds on one thread (the announced estimate, not a limit)."""
        return {"bart": 0.12, "t5": 0.12}.get(self.arch, 0.08)

    def trained_key(self) -> TrainedKey:
        """What names the trained directory: the model's name, ``settings()`` and ``CACHE_FORMAT``."""
        return TrainedKey(self.model_name, self.settings(), CACHE_FORMAT, directory=True)

    def cache_path(self) -> Path:
        """Where this machine keeps the model directory it trains with exactly these settings."""
        return self.trained_key().cache_path(self.cache_dir)

    def load(self) -> LoadedModel:
        from modelxray.models.trained_cache import load_trained_directory

        return load_trained_directory(self, self.model_name, self._train_into)

    # -- training ---------------------------------------------------------------------------------
    def _train_into(self, directory: Path) -> str:
        """Train, then write the model directory atomically (parallel jobs never read half of one)."""
        import torch

        from modelxray.models.text_tokenizer import save_tokenizer, train_tokenizer
        from modelxray.models.trained_cache import write_directory

        text = shipped_text()
        start = time.perf_counter()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            tok = train_tokenizer(text, self.vocab_size, self.arch)
            tok.model_max_length = 512
            net = self._build(tok)
            if self.arch in ("t5", "bart"):
                final = self._train_seq2seq(net, tok, text)
            else:
                final = self._train_bert(net, tok, text)
        seconds = time.perf_counter() - start
        write_directory(directory, net.eval(), lambda d: save_tokenizer(tok, d))
        what = "filling masked tokens" if self.arch == "bert" else "restoring dropped words"
        return (
            f"trained now: {self.steps} steps of AdamW (lr {self.lr}, seed {self.seed}) {what} in the Python docs "
            f"outside the evaluated examples, {seconds:.0f} s, final training loss {final:.3f}"
        )

    def _build(self, tok: Any):
        if self.arch == "bart":
            from transformers import BartConfig, BartForConditionalGeneration

            config = BartConfig(
                vocab_size=len(tok),
                d_model=self.dim,
                encoder_layers=self.depth,
                decoder_layers=self.depth,
                encoder_attention_heads=self.heads,
                decoder_attention_heads=self.heads,
                encoder_ffn_dim=self.ffn,
                decoder_ffn_dim=self.ffn,
                max_position_embeddings=512,
                dropout=0.0,
                attention_dropout=0.0,
                pad_token_id=tok.pad_token_id,
                bos_token_id=tok.bos_token_id,
                eos_token_id=tok.eos_token_id,
                decoder_start_token_id=tok.eos_token_id,
                forced_eos_token_id=tok.eos_token_id,
            )
            model = BartForConditionalGeneration(config)
            model.generation_config.forced_bos_token_id = tok.bos_token_id
            return model
        if self.arch == "t5":
            from transformers import T5Config, T5ForConditionalGeneration

            config = T5Config(
                vocab_size=len(tok),
                d_model=self.dim,
                d_kv=self.dim // self.heads,
                d_ff=self.ffn,
                num_layers=self.depth,
                num_decoder_layers=self.depth,
                num_heads=self.heads,
                dropout_rate=0.0,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
                decoder_start_token_id=tok.pad_token_id,
            )
            return T5ForConditionalGeneration(config)
        from transformers import BertConfig, BertForMaskedLM

        config = BertConfig(
            vocab_size=len(tok),
            hidden_size=self.dim,
            num_hidden_layers=self.depth,
            num_attention_heads=self.heads,
            intermediate_size=self.ffn,
            max_position_embeddings=512,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            pad_token_id=tok.pad_token_id,
        )
        return BertForMaskedLM(config)

    def _optimize(self, net: Any, batch_of, desc: str) -> float:
        """``trained_cache.optimize`` on the model's own loss of ``batch_of(step)`` (its keyword
        inputs with ``labels``)."""
        from modelxray.models.trained_cache import optimize

        loss_of = lambda step: net(**batch_of(step)).loss  # noqa: E731
        return optimize(net, loss_of, self.steps, self.lr, self.weight_decay, desc, self.progress)

    def held_out_passages(self, text: str) -> set[str]:
        """The passages the seq2seq evaluation scores with these dataset settings."""
        from modelxray.data.text_tasks import denoising_pairs

        pairs = denoising_pairs(text, self.held_out_examples, self.drop_rate, self.held_out_seed, PASSAGE_WORDS)
        return {target for _, target in pairs}

    def training_words(self, text: str) -> list[str]:
        """The prose a seq2seq model trains on: every passage but the evaluated ones, in order."""
        from modelxray.data.text_tasks import passages

        held = self.held_out_passages(text)
        return " ".join(p for p in passages(text, PASSAGE_WORDS // 2, PASSAGE_WORDS) if p not in held).split()

    def _train_seq2seq(self, net: Any, tok: Any, text: str) -> float:
        """Each step: ``batch_size`` random runs of 12 to 24 words of the prose outside the evaluated
        passages (a fresh run every time, so the model learns to copy and fill in, not to recall),
        each with a fresh random ``drop_rate`` of its words dropped as the source, the whole run as
        the target."""
        words = self.training_words(text)
        rng = random.Random(self.seed)

        def batch_of(_step: int) -> dict:
            chosen = []
            for _ in range(self.batch_size):
                n = rng.randint(PASSAGE_WORDS // 2, PASSAGE_WORDS)
                start = rng.randrange(len(words) - n)
                chosen.append(words[start : start + n])
            sources = [" ".join([w for w in run if rng.random() >= self.drop_rate] or run[:1]) for run in chosen]
            targets = [" ".join(run) for run in chosen]
            enc = tok(sources, padding=True, truncation=True, max_length=self.max_len, return_tensors="pt")
            labels = tok(targets, padding=True, truncation=True, max_length=self.max_len, return_tensors="pt")
            target = labels["input_ids"].masked_fill(labels["attention_mask"] == 0, -100)
            return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": target}

        return self._optimize(net, batch_of, f"training {self.model_name}")

    def _train_bert(self, net: Any, tok: Any, text: str) -> float:
        """Each step: ``batch_size`` random windows of the token stream after the held-out part,
        ``mask_rate`` of their tokens chosen: 80% masked, 10% a random token, 10% kept."""
        import torch

        ids = torch.tensor(tok(text, add_special_tokens=False)["input_ids"])
        held = self.held_out_examples * self.held_out_seq_len
        stream = ids[held:]
        body = self.max_len - 2
        if stream.numel() < body * self.batch_size:
            raise ConfigError("held_out_examples", f"leaves {stream.numel()} tokens to train on; lower it")
        gen = torch.Generator().manual_seed(self.seed)
        specials = torch.tensor(sorted(set(tok.all_special_ids)))

        def batch_of(_step: int) -> dict:
            starts = torch.randint(0, stream.numel() - body, (self.batch_size,), generator=gen)
            rows = torch.stack([stream[s : s + body] for s in starts.tolist()])
            cls = torch.full((self.batch_size, 1), tok.cls_token_id)
            sep = torch.full((self.batch_size, 1), tok.sep_token_id)
            inputs = torch.cat([cls, rows, sep], 1)
            chosen = torch.rand(inputs.shape, generator=gen) < self.mask_rate
            chosen &= ~torch.isin(inputs, specials)
            labels = inputs.masked_fill(~chosen, -100)
            how = torch.rand(inputs.shape, generator=gen)
            masked = inputs.masked_fill(chosen & (how < 0.8), tok.mask_token_id)
            randoms = torch.randint(len(specials), len(tok), inputs.shape, generator=gen)
            masked = torch.where(chosen & (how >= 0.8) & (how < 0.9), randoms, masked)
            return {"input_ids": masked, "attention_mask": torch.ones_like(masked), "labels": labels}

        return self._optimize(net, batch_of, f"training {self.model_name}")
