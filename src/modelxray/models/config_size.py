"""A model's size from its config alone, before anything is built: the model is constructed on the
meta device (shapes, no memory) and its parameters and buffers counted. Why: a ``config.json`` may
describe a model far larger than the machine (a hand-edited width, a 70B config without its weights),
and building it as given fills the memory before any check could speak."""

from __future__ import annotations

from pathlib import Path


def parameter_count(config_dir: Path, auto_class: str | None) -> int | None:
    """Parameters and buffers of the model ``config_dir``'s config.json describes, built as
    ``auto_class`` (``AutoModelForCausalLM`` ...; ``AutoModel`` when None); None when transformers
    cannot build it from the config alone (its own code, an unknown type)."""
    import torch
    import transformers

    try:
        config = transformers.AutoConfig.from_pretrained(str(config_dir))
        cls = getattr(transformers, auto_class or "AutoModel")
        with torch.device("meta"):
            model = cls.from_config(config)
    except Exception:  # noqa: BLE001 - no estimate; the load says what is wrong
        return None
    return sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())
