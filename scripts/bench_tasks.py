"""Benchmark: the scoring loop of each text and speech kind against a bare PyTorch loop over the same
batches (``model(**inputs)`` under ``torch.inference_mode``, nothing else).

    python scripts/bench_tasks.py                         # random-weight models of each kind, built here
    python scripts/bench_tasks.py --dirs /models/bert-base-uncased /models/t5-small --examples 64

Prints examples/s of both loops and their ratio per kind (target >= 0.95: scoring a kind must add
little to its forward pass). Rounds alternate the two loops so drifting machine load hits both.
Without ``--dirs`` it builds BERT (masked LM and classifier), T5 and Whisper directories with
``--hidden`` width and ``--layers`` layers and a tokenizer trained on the shipped text.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from modelxray.data.pydoc_topics import PydocTopics
from modelxray.kinds.table import kind_of
from modelxray.measure.scoring import forward_logits, score_windows
from modelxray.metrics.windows import batched
from modelxray.models.hf import HFSource


def build_dirs(root: Path, hidden: int, layers: int) -> list[Path]:
    """Random-weight BERT (MLM, classifier), T5 and Whisper directories with trained tokenizers."""
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        BertForSequenceClassification,
        T5Config,
        T5ForConditionalGeneration,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
    )

    from modelxray.models.text_tokenizer import save_tokenizer, train_tokenizer

    text = PydocTopics().read_text()
    torch.manual_seed(0)
    heads, ffn = max(2, hidden // 64), 4 * hidden
    out = []
    bert_tok = train_tokenizer(text, 4000, "bert")
    bert = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=ffn)
    for name, cls, extra in (
        ("bert_mlm", BertForMaskedLM, {}),
        ("bert_classifier", BertForSequenceClassification, {"num_labels": 8}),
    ):
        d = root / name
        cls(BertConfig(vocab_size=len(bert_tok), **bert, **extra)).save_pretrained(d)
        save_tokenizer(bert_tok, d)
        out.append(d)
    t5_tok = train_tokenizer(text, 4000, "t5")
    d = root / "t5"
    T5ForConditionalGeneration(
        T5Config(
            vocab_size=len(t5_tok), d_model=hidden, d_kv=hidden // heads, d_ff=ffn, num_layers=layers,
            num_heads=heads, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
        )
    ).save_pretrained(d)  # fmt: skip
    save_tokenizer(t5_tok, d)
    out.append(d)
    w_tok = train_tokenizer(text, 4000, "whisper")
    d = root / "whisper"
    ids = w_tok.get_vocab()
    WhisperForConditionalGeneration(
        WhisperConfig(
            vocab_size=len(w_tok), d_model=hidden, encoder_layers=layers, decoder_layers=layers,
            encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn,
            max_source_positions=250, decoder_start_token_id=ids["<|startoftranscript|>"],
            eos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<pad>"], bos_token_id=ids["<|endoftext|>"],
            begin_suppress_tokens=None, suppress_tokens=None,
        )
    ).save_pretrained(d)  # fmt: skip
    WhisperFeatureExtractor(chunk_length=5).save_pretrained(d)
    save_tokenizer(w_tok, d)
    out.append(d)
    return out


def bare_loop(model, batches) -> float:
    start = time.perf_counter()
    with torch.inference_mode():
        for inputs, _ in batches:
            model(**inputs)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dirs", nargs="*", help="Hugging Face model directories (default: build random-weight ones)")
    ap.add_argument("--examples", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dirs = [Path(d) for d in args.dirs] if args.dirs else build_dirs(Path(tmp), args.hidden, args.layers)
        dataset = PydocTopics(seq_len=args.seq_len, examples=args.examples)
        print(f"{'kind':<26} {'ours ex/s':>10} {'bare ex/s':>10} {'ratio':>6}")
        for d in dirs:
            loaded = HFSource(name_or_path=str(d), device="cpu").load()
            data = kind_of(loaded).examples_for(dataset, loaded)
            batches = [(x, t) for x, t in batched(data.windows, args.batch_size)]
            model = loaded.model
            forward_logits(model, batches[0][0])  # warm-up
            ours, bare = [], []
            for _ in range(args.rounds):
                bare.append(bare_loop(model, batches))
                _, seconds = score_windows(model, data.windows, args.batch_size, [1], progress=False)
                ours.append(seconds)
            n = len(data.windows)
            o, b = n / statistics.median(ours), n / statistics.median(bare)
            print(f"{f'{loaded.kind} ({d.name})':<26} {o:>10.1f} {b:>10.1f} {o / b:>6.3f}")


if __name__ == "__main__":
    main()
