"""``reference=``: the model every comparing analyzer compares the subject with. ``none`` keeps
today's meaning, the subject itself before ``quant=`` changes it; ``file``, ``hf`` and ``gguf`` name
another model (the F16 GGUF a Q4_K_M was made from, the base model of a fine-tune) with the keys of
the model options of the same names."""

from __future__ import annotations

from dataclasses import dataclass

from modelxray.core.configurable import Configurable


@dataclass
class NoReference(Configurable):
    """The model under analysis before ``quant=``: what quantization changed is measured against it."""
