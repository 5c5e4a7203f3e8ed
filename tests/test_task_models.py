"""The tiny task models of ``task_models`` reload offline with the Auto classes and run on real text and audio,
and the offline tokenizers behind them round-trip text and train deterministically."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from modelxray.models.text_tokenizer import ctc_vocab, save_tokenizer, train_tokenizer
from task_models import ALL, SAMPLING_RATE, shipped_text, tokenizer

LOCAL = dict(local_files_only=True)

# style -> the special token ids its tokenizer must give
SPECIAL_IDS = {
    "bert": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4},
    "t5": {"<pad>": 0, "</s>": 1, "<unk>": 2, **{f"<extra_id_{i}>": 999 - i for i in range(10)}},
    "bart": {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 4},
    "whisper": {
        "<|endoftext|>": 0,
        "<|startoftranscript|>": 1,
        "<|en|>": 2,
        "<|transcribe|>": 3,
        "<|notimestamps|>": 4,
        "<pad>": 5,
    },
}


def sentences(n: int = 4) -> list[str]:
    """The first lines of the shipped text with at least 8 words (ASCII): real text none of the tests made up."""
    lines = (line.strip() for line in shipped_text().splitlines())
    return [line for line in lines if len(line.split()) >= 8 and line.isascii()][:n]


def words(text: str) -> list[str]:
    """Letters and digits: BERT's pre-tokenizer splits at punctuation, underscores included, so its decode
    gives "_ _ debug _ _" for "__debug__" (as bert-base-uncased does)."""
    return re.findall(r"[^\W_]+", text)


def sine(seconds: float = 1.0, hz: float = 440.0) -> np.ndarray:
    t = np.arange(int(seconds * SAMPLING_RATE)) / SAMPLING_RATE
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def check_text_tokenizer(tok, style: str) -> None:
    """Special ids as the style promises, and decode(encode(sentence)) gives the sentence's words back."""
    assert {t: tok.convert_tokens_to_ids(t) for t in SPECIAL_IDS[style]} == SPECIAL_IDS[style]
    assert len(tok) == 1000
    for sentence in sentences():
        ids = tok(sentence)["input_ids"]
        assert tok.unk_token_id not in ids or style == "whisper"  # whisper's unk is <|endoftext|>, never produced
        back = tok.decode(ids, skip_special_tokens=True)
        want = sentence.lower() if style == "bert" else sentence
        assert words(back) == words(want), (sentence, back)
        if style in ("bart", "whisper"):
            assert back == sentence  # byte-level BPE is lossless
    ids = tok("a b")["input_ids"]
    first, last = {"bert": ("[CLS]", "[SEP]"), "bart": ("<s>", "</s>"), "t5": (None, "</s>")}.get(style, (None, None))
    if first:
        assert ids[0] == tok.convert_tokens_to_ids(first)
    if last:
        assert ids[-1] == tok.convert_tokens_to_ids(last)
    if style == "whisper":
        assert all(i not in SPECIAL_IDS["whisper"].values() for i in ids)  # no post-processor: the caller prompts


@pytest.mark.parametrize("style", sorted(SPECIAL_IDS))
def test_train_tokenizer_specials_and_round_trip(style):
    check_text_tokenizer(tokenizer(style), style)


def test_train_tokenizer_is_deterministic():
    text = shipped_text()[:100_000]
    for style in SPECIAL_IDS:
        a, b = (train_tokenizer(text, 500, style) for _ in range(2))
        assert a.get_vocab() == b.get_vocab(), style
        assert a.backend_tokenizer.to_str() == b.backend_tokenizer.to_str(), style


def test_train_tokenizer_rejects_unknown_style():
    with pytest.raises(ValueError, match="style"):
        train_tokenizer("some text", style="gpt")


def test_ctc_vocab():
    vocab = ctc_vocab(shipped_text())
    assert list(vocab)[:5] == ["<pad>", "<s>", "</s>", "<unk>", "|"]
    assert list(vocab)[5:] == sorted("'abcdefghijklmnopqrstuvwxyz")
    assert list(vocab.values()) == list(range(len(vocab)))
    assert ctc_vocab("Ab, ba!") == {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "|": 4, "a": 5, "b": 6}


def test_save_tokenizer_reloads_the_same(tmp_path):
    from transformers import AutoTokenizer

    save_tokenizer(tokenizer("t5"), tmp_path)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    back = AutoTokenizer.from_pretrained(tmp_path, **LOCAL)
    assert back.get_vocab() == tokenizer("t5").get_vocab()
    assert back.all_special_tokens == tokenizer("t5").all_special_tokens
    assert "<extra_id_0>" in back.all_special_tokens


def _text_batch(tok):
    return tok(sentences(2), padding=True, truncation=True, return_tensors="pt")


def run_bert(d, name):
    import transformers
    from transformers import AutoTokenizer

    auto = {
        "bert_mlm": "AutoModelForMaskedLM",
        "bert_classifier": "AutoModelForSequenceClassification",
        "bert_token_classifier": "AutoModelForTokenClassification",
    }[name]
    model = getattr(transformers, auto).from_pretrained(d, **LOCAL).eval()
    tok = AutoTokenizer.from_pretrained(d, **LOCAL)
    check_text_tokenizer(tok, "bert")
    assert tok.model_max_length == model.config.max_position_embeddings == 512
    assert model.config.pad_token_id == tok.pad_token_id
    assert tok("a", "b")["token_type_ids"] == [0, 0, 0, 1, 1]  # [CLS] a [SEP] b [SEP]
    batch = _text_batch(tok)
    n, length = batch["input_ids"].shape
    with torch.no_grad():
        logits = model(**batch).logits
    if name == "bert_mlm":
        masked = tok(f"the {tok.mask_token} statement", return_tensors="pt")
        assert (masked["input_ids"][0] == tok.mask_token_id).sum() == 1
        assert logits.shape == (n, length, len(tok))
    elif name == "bert_classifier":
        assert logits.shape == (n, 8)
        assert model.config.id2label == {i: f"LABEL_{i}" for i in range(8)}
    else:
        assert logits.shape == (n, length, 5)
        assert model.config.label2id == {f"LABEL_{i}": i for i in range(5)}


def run_seq2seq(d, name):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model = AutoModelForSeq2SeqLM.from_pretrained(d, **LOCAL).eval()
    tok = AutoTokenizer.from_pretrained(d, **LOCAL)
    check_text_tokenizer(tok, name)
    source, target = sentences(2)
    batch = tok(source, return_tensors="pt")
    labels = tok(target, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model(**batch, labels=labels)
    assert out.logits.shape == (1, labels.shape[1], len(tok))
    assert torch.isfinite(out.loss)
    gen = model.generate(**batch, max_new_tokens=4, do_sample=False)
    start = [tok.pad_token_id] if name == "t5" else [tok.eos_token_id, tok.bos_token_id]  # BART: </s> then <s>
    assert gen[0, : len(start)].tolist() == start
    assert model.config.decoder_start_token_id == start[0]
    assert model.config.eos_token_id == tok.eos_token_id and model.config.pad_token_id == tok.pad_token_id


def run_whisper(d, name):
    from transformers import AutoFeatureExtractor, AutoModelForSpeechSeq2Seq, AutoTokenizer

    model = AutoModelForSpeechSeq2Seq.from_pretrained(d, **LOCAL).eval()
    tok = AutoTokenizer.from_pretrained(d, **LOCAL)
    features = AutoFeatureExtractor.from_pretrained(d, **LOCAL)
    check_text_tokenizer(tok, "whisper")
    x = features(sine(), sampling_rate=SAMPLING_RATE, return_tensors="pt").input_features
    assert x.shape == (1, 80, 500)  # 1 s padded to the 5 s window
    prompt = tok.convert_tokens_to_ids(["<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"])
    with torch.no_grad():
        logits = model(input_features=x, decoder_input_ids=torch.tensor([prompt])).logits
    assert logits.shape == (1, 4, len(tok))
    gen = model.generate(x, max_new_tokens=3, return_dict_in_generate=True).sequences
    assert gen[0, :4].tolist() == prompt  # from the saved generation config: language en, transcribe
    assert model.config.decoder_start_token_id == prompt[0]
    assert model.generation_config.eos_token_id == tok.eos_token_id


def run_wav2vec2(d, name):
    from transformers import AutoFeatureExtractor, AutoModelForCTC, AutoTokenizer

    model = AutoModelForCTC.from_pretrained(d, **LOCAL).eval()
    tok = AutoTokenizer.from_pretrained(d, **LOCAL)
    features = AutoFeatureExtractor.from_pretrained(d, **LOCAL)
    assert type(tok).__name__ == "Wav2Vec2CTCTokenizer"
    assert tok.get_vocab() == ctc_vocab(shipped_text()) and tok.pad_token_id == model.config.pad_token_id == 0
    x = features(sine(), sampling_rate=SAMPLING_RATE, return_tensors="pt")
    assert set(x) == {"input_values"} and x["input_values"].shape == (1, SAMPLING_RATE)
    sentence = sentences(1)[0].lower()
    labels = torch.tensor([tok(sentence)["input_ids"][:20]])
    assert tok.decode(tok(sentence)["input_ids"], group_tokens=False) == sentence
    with torch.no_grad():
        out = model(x["input_values"], labels=labels)
    assert out.logits.shape == (1, 49, len(tok))  # 16,000 samples / 320 -> 49 frames
    assert torch.isfinite(out.loss)


RUN = {"t5": run_seq2seq, "bart": run_seq2seq, "whisper": run_whisper, "wav2vec2_ctc": run_wav2vec2}


@pytest.mark.parametrize("name", sorted(ALL))
def test_builder_reloads_offline_and_runs(name, tmp_path):
    d = ALL[name](tmp_path / name)
    assert d == tmp_path / name and (d / "config.json").exists() and (d / "model.safetensors").exists()
    RUN.get(name, run_bert)(d, name)
