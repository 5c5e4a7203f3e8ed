"""Text datasets become one token stream, tokenised once and cached on disk by content hash.

The dataset configs and the data types they produce; numpy and torch are imported when text is
tokenised, so importing a dataset config stays cheap."""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from modelxray.core.configurable import Configurable

if TYPE_CHECKING:
    import torch

MIN_TOKENS = 2  # one input and one target: the least a language model can be scored on


@dataclass
class TokenData:
    """The evaluation token stream: ``ids`` capped at ``max_tokens``, and its size in UTF-8 bytes."""

    name: str
    ids: torch.Tensor  # 1-D int64
    n_bytes: int
    seq_len: int
    available_tokens: int  # before the max_tokens cap
    calibration: torch.Tensor | None = None  # (N, seq_len) windows after the evaluated span, for GPTQ/AWQ
    train_ids: torch.Tensor | None = None  # 1-D: every token after the evaluated span (training, train=)
    note: str | None = None  # e.g. a text shorter than one window, scored as one shorter window

    @property
    def n_tokens(self) -> int:
        return int(self.ids.numel())


@dataclass
class TextDataset(Configurable):
    """Base of text dataset configs. Subclasses supply ``name`` and ``read_text()``."""

    modality: ClassVar[str] = "text"  # what its examples are: a model of another kind cannot use them

    seq_len: int = 256
    max_tokens: int | None = 8192
    calibration_windows: int = 128  # windows of seq_len after the evaluated tokens (GPTQ, AWQ)
    cache_dir: str = "~/.cache/modelxray"
    # models that are not causal LMs get examples built from this text (data.text_tasks, data.spoken_text):
    examples: int = 64  # masked windows, source/target pairs, paragraphs or spoken sentences
    mask_rate: float = 0.15  # masked LMs: share of each window's tokens masked and scored
    drop_rate: float = 0.15  # seq2seq models: share of a passage's words dropped from its source
    task_seed: int = 0  # which tokens are masked, words dropped, paragraphs and sentences picked
    speech_voice: str = "en"  # speech models: the espeak-ng voice that speaks the sentences
    speech_words_per_minute: int = 160

    def validate(self) -> None:
        self.require_positive("seq_len")
        self.require_positive("examples")
        self.require_positive("speech_words_per_minute")
        for key in ("mask_rate", "drop_rate"):
            value = getattr(self, key)
            if not 0 < value < 1:
                from modelxray.core.errors import ConfigError

                raise ConfigError(key, f"must be between 0 and 1 (a share of tokens or words), got {value!r}")
        self.require_non_negative("calibration_windows")
        self.require_positive("max_tokens", allow_none=True)
        if self.max_tokens is not None and self.max_tokens < MIN_TOKENS:
            from modelxray.core.errors import ConfigError

            raise ConfigError(
                "max_tokens", f"must be at least {MIN_TOKENS} (one input and one target), got {self.max_tokens}"
            )

    @property
    def name(self) -> str:
        return type(self).__name__

    def read_text(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def check_tokens(self, tokenizer: Any, vocab_size: int | None = None) -> None:
        """The text through the model's tokenizer, before the weights load (the ids are cached for the
        load): too few tokens to score one, or ids beyond the ``vocab_size`` the model's embedding
        holds (a tokenizer of another model), is one line."""
        from modelxray.core.errors import ConfigError

        ids = tokenize_cached(self.read_text(), tokenizer, Path(os.path.expanduser(self.cache_dir)) / "tokens")
        if ids.numel() < MIN_TOKENS:
            raise self.too_short(int(ids.numel()))
        top = int(ids.max())
        if vocab_size is not None and top >= vocab_size:
            raise ConfigError(
                "model.tokenizer",
                f"the tokenizer gives ids up to {top:,} on {self.name}, beyond the model's {vocab_size:,}-token "
                "vocabulary (its config's vocab_size): use the tokenizer the model was trained with",
            )

    def too_short(self, n_tokens: int) -> Exception:
        """The one line for a text of ``n_tokens``, fewer than one input and one target."""
        from modelxray.core.errors import ConfigError

        return ConfigError(
            "dataset",
            f"{self.name}'s text is {n_tokens} token(s) long: a language model needs at least {MIN_TOKENS} "
            "(one input and one target); give more text",
        )

    def load(self, tokenizer: Any) -> TokenData:
        text = self.read_text()
        all_ids = tokenize_cached(text, tokenizer, Path(os.path.expanduser(self.cache_dir)) / "tokens")
        available = int(all_ids.numel())
        ids = all_ids if self.max_tokens is None else all_ids[: self.max_tokens]
        n_bytes = len(text.encode("utf-8")) if ids.numel() == available else _decoded_bytes(tokenizer, ids)
        rest = all_ids[ids.numel() :]
        n_cal = min(self.calibration_windows, rest.numel() // self.seq_len)
        calibration = rest[: n_cal * self.seq_len].view(n_cal, self.seq_len) if n_cal else None
        seq_len, note = self.seq_len, None
        if MIN_TOKENS <= available < self.seq_len:  # the whole text fits one window: score that shorter window
            seq_len = int(ids.numel())
            note = (
                f"the text is {available} tokens, shorter than dataset.seq_len={self.seq_len}: one window of {seq_len}"
            )
            logging.getLogger(__name__).warning("%s: %s", self.name, note)
        return TokenData(self.name, ids, n_bytes, seq_len, available, calibration, train_ids=rest, note=note)


def _decoded_bytes(tokenizer: Any, ids: torch.Tensor) -> int:
    return len(tokenizer.decode(ids.tolist()).encode("utf-8"))


def tokenizer_identity(tokenizer: Any) -> str:
    """A hash that changes whenever the tokenizer would split text differently: the token cache's key.
    Duck-typed on purpose, so datasets take any tokenizer the model source loaded and never import models."""
    if hasattr(tokenizer, "identity"):
        return tokenizer.identity()
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return hashlib.sha256(backend.to_str().encode()).hexdigest()[:16]
    name = getattr(tokenizer, "name_or_path", type(tokenizer).__name__)
    return hashlib.sha256(f"{name}:{len(tokenizer)}".encode()).hexdigest()[:16]


def tokenize_cached(text: str, tokenizer: Any, cache_dir: Path) -> torch.Tensor:
    """Token ids of ``text`` (no special tokens), from ``cache_dir`` when this text and tokenizer were seen."""
    import numpy as np
    import torch

    key = hashlib.sha256(text.encode("utf-8")).hexdigest()[:24] + "-" + tokenizer_identity(tokenizer)
    path = cache_dir / f"{key}.npy"
    if path.exists():
        return torch.from_numpy(np.load(path).astype(np.int64))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    arr = np.asarray(ids, dtype=np.int32)
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        np.save(tmp, arr)
        os.replace(tmp, path)
    except OSError:  # a full disk or a read-only cache: the ids are known, only the next run tokenizes again
        tmp.unlink(missing_ok=True)
    return torch.from_numpy(arr.astype(np.int64))


@dataclass
class ClassificationData:
    """A supervised split for classifiers: features in ``feature_range``, integer labels.

    ``x_test``/``y_test`` are what analyzers evaluate; the train split is only for building a model."""

    name: str
    x_train: torch.Tensor  # (N, *input_shape) float32
    y_train: torch.Tensor  # (N,) int64
    x_test: torch.Tensor
    y_test: torch.Tensor
    n_classes: int
    feature_range: tuple[float, float]
    input_shape: tuple[int, ...]
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. flipped label indices (digits_noisy)

    @property
    def n_samples(self) -> int:
        return int(self.y_test.numel())
