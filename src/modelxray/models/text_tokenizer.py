"""Small tokenizers trained offline on a given text.

There is no model hub at run time (``HF_HUB_OFFLINE=1``), so a model built or trained here cannot
download its vocabulary: it needs one trained from the text that ships with the environment. Each
``style`` copies the special tokens and post-processing of one model family (BERT, T5, BART,
Whisper), so the models built on top (``tests/task_models.py``) behave like their hub cousins;
``ctc_vocab`` gives the character vocabulary a Wav2Vec2 CTC head needs instead.

Training is deterministic: the same text, size and style give the same tokenizer in any process and
with any thread count (``_canonical`` fixes the ids the trainers hand out in hash-map order).
"""

from __future__ import annotations

import json
import os
import string
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

STYLES = ("bert", "t5", "bart", "whisper")

BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
T5_SPECIALS = ["<pad>", "</s>", "<unk>"]
T5_SENTINELS = 10  # <extra_id_0> .. <extra_id_9>, the last ids of the vocabulary as in T5 (extra_id_0 the highest)
BART_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
WHISPER_SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>", "<pad>"]
CTC_SPECIALS = ["<pad>", "<s>", "</s>", "<unk>", "|"]


def _chunks(text: str, size: int = 1 << 16) -> list[str]:
    """The text in pieces of about ``size`` characters cut at line ends (no word is split): the trainers
    read an iterator of strings."""
    pieces, cur, n = [], [], 0
    for line in text.splitlines(keepends=True):
        cur.append(line)
        n += len(line)
        if n >= size:
            pieces.append("".join(cur))
            cur, n = [], 0
    if cur:
        pieces.append("".join(cur))
    return pieces


def _canonical(tok, n_specials: int):
    """The trained tokenizer with its ids (and Unigram scores) in a fixed order.

    The ``tokenizers`` trainers pick the same tokens run after run, but the WordPiece trainer numbers the
    ``##`` pieces in hash-map order and the Unigram trainer sums its scores in hash-map order (noise in the
    last bits, which reorders near-equal pieces); hash maps are seeded per process. So: special tokens keep
    their ids, WordPiece pieces follow sorted by text, Unigram pieces by rounded score, then text.
    Encoding is unchanged (WordPiece matches the longest piece whatever its id; Unigram scores move by 1e-9).
    """
    from tokenizers import Tokenizer

    spec = json.loads(tok.to_str())
    model = spec["model"]
    if model["type"] == "WordPiece":
        by_id = sorted(model["vocab"], key=model["vocab"].get)
        order = by_id[:n_specials] + sorted(by_id[n_specials:])
        model["vocab"] = {piece: i for i, piece in enumerate(order)}
    elif model["type"] == "Unigram":
        pieces = [[piece, round(score, 9)] for piece, score in model["vocab"]]
        pieces = pieces[:n_specials] + sorted(pieces[n_specials:], key=lambda ps: (-ps[1], ps[0]))
        # The trainer appends the characters no kept piece covers with scores 1e-4 apart, in hash-set
        # order: hand the same scores out again to the characters in sorted order.
        start = len(pieces) - 1
        while (
            start > n_specials
            and len(pieces[start - 1][0]) == 1
            and 0 <= pieces[start - 1][1] - pieces[start][1] < 2e-4
        ):
            start -= 1
        tail = pieces[start:]
        scores = [score for _, score in tail]
        pieces[start:] = [[piece, score] for (piece, _), score in zip(sorted(tail), scores)]
        model["vocab"] = pieces
    return Tokenizer.from_str(json.dumps(spec))


def _bert(text: str, vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)  # lowercase, strip accents, clean control chars
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=BERT_SPECIALS, show_progress=False)
    tok.train_from_iterator(_chunks(text), trainer)
    tok = _canonical(tok, len(BERT_SPECIALS))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    names = dict(
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],  # segment ids for sentence pairs
    )
    return tok, names


def _t5(text: str, vocab_size: int):
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.Unigram())
    # SentencePiece-like: all whitespace is one space, which the Metaspace pre-tokenizer marks as "▁"
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(r"\s+"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size - T5_SENTINELS,
        special_tokens=T5_SPECIALS,
        unk_token="<unk>",
        show_progress=False,
    )
    tok.train_from_iterator(_chunks(text), trainer)
    tok = _canonical(tok, len(T5_SPECIALS))
    # appended in reverse, so that <extra_id_0> gets the highest id, as in T5
    tok.add_special_tokens([AddedToken(f"<extra_id_{i}>", special=True) for i in reversed(range(T5_SENTINELS))])
    eos = tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B:1 </s>:1", special_tokens=[("</s>", eos)]
    )
    names = dict(
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        additional_special_tokens=[f"<extra_id_{i}>" for i in range(T5_SENTINELS)],
    )
    return tok, names


def _byte_bpe(text: str, vocab_size: int, specials: list):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_chunks(text), trainer)
    return tok


def _bart(text: str, vocab_size: int):
    from tokenizers import AddedToken, processors

    # <mask> takes the space before it, as in BART, so "a <mask> b" fills in " word"
    specials = [*BART_SPECIALS[:-1], AddedToken("<mask>", lstrip=True, special=True)]
    tok = _byte_bpe(text, vocab_size, specials)
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B:1 </s>:1", special_tokens=[("<s>", bos), ("</s>", eos)]
    )
    names = dict(bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>", mask_token="<mask>")
    return tok, names


def _whisper(text: str, vocab_size: int):
    tok = _byte_bpe(text, vocab_size, WHISPER_SPECIALS)
    # no post-processor: the caller adds the decoder prompt (<|startoftranscript|><|en|><|transcribe|>...)
    names = dict(
        bos_token="<|endoftext|>",  # as in Whisper, where bos, eos and unk are all <|endoftext|>
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        pad_token="<pad>",
        additional_special_tokens=WHISPER_SPECIALS[1:5],
    )
    return tok, names


def train_tokenizer(text: str, vocab_size: int = 1000, style: str = "bert") -> PreTrainedTokenizerFast:
    """A ``PreTrainedTokenizerFast`` of ``vocab_size`` tokens (special tokens included) trained on ``text``,
    with the special tokens and post-processing of ``style``: ``bert``, ``t5``, ``bart`` or ``whisper``."""
    builders = {"bert": _bert, "t5": _t5, "bart": _bart, "whisper": _whisper}
    if style not in builders:
        raise ValueError(f"unknown tokenizer style {style!r}; choose one of {', '.join(STYLES)}")
    if not text.strip():
        raise ValueError("cannot train a tokenizer on empty text")
    from transformers import PreTrainedTokenizerFast

    backend, names = builders[style](text, vocab_size)
    return PreTrainedTokenizerFast(tokenizer_object=backend, clean_up_tokenization_spaces=False, **names)


def ctc_vocab(text: str) -> dict[str, int]:
    """The character vocabulary of a Wav2Vec2 CTC head: ``<pad>`` (the CTC blank) 0, ``<s>`` 1, ``</s>`` 2,
    ``<unk>`` 3, the word delimiter ``|`` 4, then the lowercase letters a-z and the apostrophe that occur in
    ``text`` (lowercased), in sorted order. Write it as ``vocab.json`` for ``Wav2Vec2CTCTokenizer``."""
    allowed = set(string.ascii_lowercase + "'")
    chars = sorted(set(text.lower()) & allowed)
    if not chars:
        raise ValueError("the text has no letters a-z for a CTC vocabulary")
    return {c: i for i, c in enumerate([*CTC_SPECIALS, *chars])}


def save_tokenizer(tok: PreTrainedTokenizerFast, directory: str | os.PathLike) -> str:
    """``tok.save_pretrained(directory)``, checked: ``AutoTokenizer`` must read back the same vocabulary and
    special tokens from the directory alone (offline), or this raises ``RuntimeError``."""
    from transformers import AutoTokenizer

    directory = os.fspath(directory)
    tok.save_pretrained(directory)
    # transformers 5 writes its new class name, TokenizersBackend; PreTrainedTokenizerFast (an alias in 5)
    # names the same loader in transformers 4 too
    config_file = os.path.join(directory, "tokenizer_config.json")
    with open(config_file, encoding="utf-8") as f:
        config = json.load(f)
    if config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
        with open(config_file, "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2, ensure_ascii=False)
            f.write("\n")
    back = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    problems = []
    if back.get_vocab() != tok.get_vocab():
        problems.append("vocabulary")
    if back.special_tokens_map != tok.special_tokens_map or back.all_special_ids != tok.all_special_ids:
        problems.append(f"special tokens {back.special_tokens_map} != {tok.special_tokens_map}")
    probe = "Hello world, the probe sentence."
    if back(probe)["input_ids"] != tok(probe)["input_ids"]:
        problems.append("encoding")
    if problems:
        raise RuntimeError(f"tokenizer saved in {directory} reloads differently: {'; '.join(problems)}")
    return directory
