"""The model the lm_eval tests share: a random 2-layer Llama with a byte-level BPE tokenizer trained on
the Python docs (lm-eval needs a Hugging Face tokenizer), and a run of it through the product."""

from __future__ import annotations

import torch

from modelxray import api

LIMIT = 12  # documents per task: enough to pair, few enough for the suite


def tiny_llama_with_bpe(path, seed: int = 0):
    """A random 2-layer Llama with a byte-level BPE tokenizer trained on the Python docs (512 ids)."""
    from pydoc_data.topics import topics

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(list(topics.values()), trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>")
    tokenizer.chat_template = "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    tokenizer.save_pretrained(path)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=0,
        eos_token_id=1,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    return path
    return path


def _run(path, tmp_path, tracking_uri, *more):
    chosen = any(m.startswith("analyzer=") for m in more)
    overrides = [
        "model=hf",
        f"model.name_or_path={path}",
        *([] if chosen else ["analyzer=lm_eval", f"analyzer.lm_eval.limit={LIMIT}"]),
        "progress=false",
        "tracker=mlflow",
        f"tracker.uri={tracking_uri}",
        "tracker.experiment=lm_eval",
        *more,
    ]
    name = "run_" + "_".join("".join(c if c.isalnum() else "-" for c in m)[-40:] for m in more)
    return api.analyze(overrides, output_dir=tmp_path / name)
