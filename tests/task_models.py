"""Tiny random-weight Hugging Face model directories for encoder, seq2seq and speech tasks.

No hub is reachable here, so tests (and small training defaults) cannot download ``prajjwal1/bert-tiny``
or ``openai/whisper-tiny``: each builder writes an equivalent directory with ``save_pretrained``
(config, safetensors weights, tokenizer trained on the shipped Python docs text, feature extractor for
speech) that the ``Auto*`` classes reload with local files only. Every model is seeded
(``torch.manual_seed(0)``), hidden size 32, 2 encoder (and 2 decoder) layers, 2 heads, feed-forward 64.
"""

from __future__ import annotations

import copy
import functools
import json
import os
from pathlib import Path

import torch

from modelxray.models.text_tokenizer import ctc_vocab, save_tokenizer, train_tokenizer

VOCAB_SIZE = 1000
SAMPLING_RATE = 16000
WHISPER_SECONDS = 5  # a 5 s window (500 mel frames) instead of Whisper's 30 s (3000), to keep tests fast

TINY = dict(hidden=32, layers=2, heads=2, ffn=64)


@functools.lru_cache(maxsize=1)
def shipped_text() -> str:
    """The Python docs topics (about 465k characters) that ship with every Python installation."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))


@functools.cache
def tokenizer(style: str):
    """The tokenizer of ``style`` trained on the shipped text, once per process (do not mutate: copy)."""
    return train_tokenizer(shipped_text(), VOCAB_SIZE, style)


def _save_tokenizer(style: str, d: Path, max_length: int):
    tok = copy.deepcopy(tokenizer(style))
    tok.model_max_length = max_length  # the model's positions, so truncation=True cuts where the model must
    save_tokenizer(tok, d)
    return tok


def _prepare(d) -> Path:
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    return d


def _labels(n: int) -> dict:
    id2label = {i: f"LABEL_{i}" for i in range(n)}
    return dict(num_labels=n, id2label=id2label, label2id={v: k for k, v in id2label.items()})


def _bert(d, head: str, **extra) -> Path:
    import transformers
    from transformers import BertConfig

    d = _prepare(d)
    tok = tokenizer("bert")
    config = BertConfig(
        vocab_size=len(tok),
        hidden_size=TINY["hidden"],
        num_hidden_layers=TINY["layers"],
        num_attention_heads=TINY["heads"],
        intermediate_size=TINY["ffn"],
        max_position_embeddings=512,
        pad_token_id=tok.pad_token_id,
        **extra,
    )
    getattr(transformers, head)(config).save_pretrained(d)
    _save_tokenizer("bert", d, 512)
    return d


def bert_mlm(d) -> Path:
    """BertForMaskedLM; the tokenizer's [MASK] (id 4) is the token to predict (BertConfig has no mask id)."""
    return _bert(d, "BertForMaskedLM")


def bert_classifier(d, num_labels: int = 8) -> Path:
    """BertForSequenceClassification with labels LABEL_0 .. LABEL_{n-1}."""
    return _bert(d, "BertForSequenceClassification", **_labels(num_labels))


def bert_token_classifier(d, num_labels: int = 5) -> Path:
    """BertForTokenClassification with labels LABEL_0 .. LABEL_{n-1}."""
    return _bert(d, "BertForTokenClassification", **_labels(num_labels))


def t5(d) -> Path:
    """T5ForConditionalGeneration; the decoder starts from <pad> (0) and stops at </s> (1), as in T5."""
    from transformers import T5Config, T5ForConditionalGeneration

    d = _prepare(d)
    tok = tokenizer("t5")
    config = T5Config(
        vocab_size=len(tok),
        d_model=TINY["hidden"],
        d_kv=16,
        d_ff=TINY["ffn"],
        num_layers=TINY["layers"],
        num_decoder_layers=TINY["layers"],
        num_heads=TINY["heads"],
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.pad_token_id,
    )
    T5ForConditionalGeneration(config).save_pretrained(d)
    _save_tokenizer("t5", d, 512)
    return d


def bart(d) -> Path:
    """BartForConditionalGeneration; the decoder starts from </s> and is forced to <s> next, as in BART."""
    from transformers import BartConfig, BartForConditionalGeneration

    d = _prepare(d)
    tok = tokenizer("bart")
    config = BartConfig(
        vocab_size=len(tok),
        d_model=TINY["hidden"],
        encoder_layers=TINY["layers"],
        decoder_layers=TINY["layers"],
        encoder_attention_heads=TINY["heads"],
        decoder_attention_heads=TINY["heads"],
        encoder_ffn_dim=TINY["ffn"],
        decoder_ffn_dim=TINY["ffn"],
        max_position_embeddings=512,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.eos_token_id,
        forced_eos_token_id=tok.eos_token_id,
    )
    model = BartForConditionalGeneration(config)
    # transformers 5 BartConfig drops forced_bos_token_id silently: it lives in the generation config now
    model.generation_config.forced_bos_token_id = tok.bos_token_id
    model.save_pretrained(d)
    _save_tokenizer("bart", d, 512)
    return d


def whisper(d) -> Path:
    """WhisperForConditionalGeneration on a 5 s window: the feature extractor pads or cuts audio to 80,000
    samples (500 mel frames) and the encoder takes 250 positions (the second conv has stride 2)."""
    from transformers import GenerationConfig, WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration

    d = _prepare(d)
    tok = tokenizer("whisper")
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|startoftranscript|>", "<|en|>", "<|transcribe|>")}
    no_timestamps = tok.convert_tokens_to_ids("<|notimestamps|>")
    features = WhisperFeatureExtractor(
        feature_size=80, sampling_rate=SAMPLING_RATE, hop_length=160, chunk_length=WHISPER_SECONDS, n_fft=400
    )
    config = WhisperConfig(
        vocab_size=len(tok),
        num_mel_bins=features.feature_size,
        d_model=TINY["hidden"],
        encoder_layers=TINY["layers"],
        decoder_layers=TINY["layers"],
        encoder_attention_heads=TINY["heads"],
        decoder_attention_heads=TINY["heads"],
        encoder_ffn_dim=TINY["ffn"],
        decoder_ffn_dim=TINY["ffn"],
        max_source_positions=features.nb_max_frames // 2,
        max_target_positions=128,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.eos_token_id,  # Whisper's bos is <|endoftext|> too
        eos_token_id=tok.eos_token_id,
        decoder_start_token_id=ids["<|startoftranscript|>"],
        # the defaults name ids of the 51k-token vocabulary (220, 50256): out of range here
        begin_suppress_tokens=[tok.eos_token_id],
        suppress_tokens=[],
    )
    model = WhisperForConditionalGeneration(config)
    # A new GenerationConfig, not the one derived from the model config: that one is marked
    # ``_from_model_config`` and drops the Whisper-only fields (lang_to_id, task_to_id, ...) on reload.
    model.generation_config = GenerationConfig(
        decoder_start_token_id=ids["<|startoftranscript|>"],
        bos_token_id=tok.eos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        max_length=config.max_target_positions,
        begin_suppress_tokens=[tok.eos_token_id],
        suppress_tokens=[],
        is_multilingual=True,
        lang_to_id={"<|en|>": ids["<|en|>"]},
        task_to_id={"transcribe": ids["<|transcribe|>"]},
        language="en",  # prompt: <|startoftranscript|><|en|><|transcribe|><|notimestamps|>
        task="transcribe",
        no_timestamps_token_id=no_timestamps,
    )
    model.save_pretrained(d)
    features.save_pretrained(d)
    _save_tokenizer("whisper", d, config.max_target_positions)
    return d


def _wav2vec2_config(**extra):
    """A tiny Wav2Vec2: its conv stack strides 5*8*8 = 320 samples (50 frames/s at 16 kHz, as wav2vec2-base)."""
    from transformers import Wav2Vec2Config

    return Wav2Vec2Config(
        hidden_size=TINY["hidden"],
        num_hidden_layers=TINY["layers"],
        num_attention_heads=TINY["heads"],
        intermediate_size=TINY["ffn"],
        conv_dim=(32, 32, 32),
        conv_stride=(5, 8, 8),
        conv_kernel=(10, 8, 8),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        feat_extract_norm="group",
        **extra,
    )


def wav2vec2_ctc(d) -> Path:
    """Wav2Vec2ForCTC over characters: the conv stack strides 5*8*8 = 320 samples (50 frames/s at 16 kHz,
    49 frames for 1 s, as wav2vec2-base) and the CTC blank is <pad> (0)."""
    from transformers import Wav2Vec2CTCTokenizer, Wav2Vec2FeatureExtractor, Wav2Vec2ForCTC

    d = _prepare(d)
    vocab = ctc_vocab(shipped_text())
    (d / "vocab.json").write_text(json.dumps(vocab, indent=1, ensure_ascii=False))
    tok = Wav2Vec2CTCTokenizer(
        os.fspath(d / "vocab.json"),
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        word_delimiter_token="|",
        do_lower_case=False,  # the vocabulary is lowercase already: callers lowercase their text
    )
    tok.save_pretrained(d)
    features = Wav2Vec2FeatureExtractor(
        feature_size=1, sampling_rate=SAMPLING_RATE, padding_value=0.0, do_normalize=True, return_attention_mask=False
    )
    features.save_pretrained(d)
    config = _wav2vec2_config(
        vocab_size=len(vocab),
        pad_token_id=vocab["<pad>"],
        bos_token_id=vocab["<s>"],
        eos_token_id=vocab["</s>"],
        ctc_loss_reduction="mean",
        ctc_zero_infinity=True,  # a label longer than the frames gives loss 0, not inf, when training
    )
    Wav2Vec2ForCTC(config).save_pretrained(d)
    return d


def wav2vec2_audio_classifier(d, words: tuple[str, ...] = ("yes", "no", "up", "down")) -> Path:
    """Wav2Vec2ForSequenceClassification whose labels are spoken words (a keyword spotter's head),
    with its feature extractor and no tokenizer: audio in, a label out."""
    from transformers import Wav2Vec2FeatureExtractor, Wav2Vec2ForSequenceClassification

    d = _prepare(d)
    Wav2Vec2FeatureExtractor(
        feature_size=1, sampling_rate=SAMPLING_RATE, padding_value=0.0, do_normalize=True, return_attention_mask=False
    ).save_pretrained(d)
    config = _wav2vec2_config(
        classifier_proj_size=16,
        id2label=dict(enumerate(words)),
        label2id={w: i for i, w in enumerate(words)},
    )
    Wav2Vec2ForSequenceClassification(config).save_pretrained(d)
    return d


ALL = {
    "bert_mlm": bert_mlm,
    "bert_classifier": bert_classifier,
    "bert_token_classifier": bert_token_classifier,
    "t5": t5,
    "bart": bart,
    "whisper": whisper,
    "wav2vec2_ctc": wav2vec2_ctc,
}
