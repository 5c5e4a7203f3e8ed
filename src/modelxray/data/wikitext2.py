"""WikiText-2 through the ``datasets`` package: needs the network (or a filled HF cache)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from modelxray.core.errors import ConfigError, require_library
from modelxray.data.base import TextDataset

_OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


def hub_offline() -> bool:
    """True when the user said so (HF_*_OFFLINE) or the hub's name does not resolve."""
    if any(os.environ.get(v, "").lower() in ("1", "true", "yes", "on") for v in _OFFLINE_VARS):
        return True
    import socket

    try:
        socket.getaddrinfo("huggingface.co", 443)
        return False
    except OSError:
        return True


@dataclass
class WikiText2(TextDataset):
    path: str = "wikitext"
    config_name: str = "wikitext-2-raw-v1"
    split: str = "test"
    separator: str = "\n\n"

    def validate(self) -> None:
        super().validate()
        require_library("dataset", "wikitext2", "datasets", "datasets", "datasets")
        if hub_offline():
            raise ConfigError(
                "dataset",
                "wikitext2 is downloaded from the Hugging Face hub, which is not reachable "
                "here (offline); use dataset=pydoc_topics or dataset=text_files dataset.paths=[...]",
            )

    @property
    def name(self) -> str:
        return f"wikitext2-{self.split}"

    def read_text(self) -> str:
        from datasets import load_dataset

        rows = load_dataset(self.path, self.config_name, split=self.split)
        return self.separator.join(rows["text"])
