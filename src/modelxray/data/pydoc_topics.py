"""The embedded default text: the Python documentation topics shipped with every CPython
(``pydoc_data.topics``, about 465k characters of English), so ``python run.py`` works offline."""

from __future__ import annotations

from dataclasses import dataclass

from modelxray.data.base import TextDataset


@dataclass
class PydocTopics(TextDataset):
    separator: str = "\n\n"  # topics joined in sorted key order

    @property
    def name(self) -> str:
        return "pydoc_topics"

    def read_text(self) -> str:
        from pydoc_data.topics import topics

        return self.separator.join(topics[k] for k in sorted(topics))
