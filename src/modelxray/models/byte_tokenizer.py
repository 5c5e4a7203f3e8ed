"""A UTF-8 byte tokenizer (256 byte ids + one end-of-text id).

Tiny test models need a tokenizer that exists offline and costs nothing to build; hub tokenizers
cannot be downloaded here. It offers the small part of the Hugging Face tokenizer interface that
modelxray uses (``__call__``, ``encode``, ``decode``, ``bos/eos_token_id``, ``len``).
"""

from __future__ import annotations


class ByteTokenizer:
    name_or_path = "byte"
    vocab_size = 257
    eos_token_id = 256
    bos_token_id = 256
    pad_token_id = 256

    def __len__(self) -> int:
        return self.vocab_size

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(text.encode("utf-8"))

    def __call__(self, text: str, add_special_tokens: bool = False, **_: object) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text)}

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        data = bytes(int(i) for i in ids if int(i) < 256)
        return data.decode("utf-8", errors="replace")

    def identity(self) -> str:
        return "byte-utf8-v1"
