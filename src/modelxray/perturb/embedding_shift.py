"""Attack a language model in its input-embedding space without knowing its forward signature: a
forward hook on the input embedding adds an offset to its output. Works for Hugging Face models
and for any ``nn.Module`` with an ``nn.Embedding`` input layer; tied output heads are untouched."""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from modelxray.core.errors import ConfigError


def input_embedding(model: nn.Module) -> nn.Module:
    """The module producing token embeddings: ``get_input_embeddings()`` or the first nn.Embedding."""
    if hasattr(model, "get_input_embeddings"):
        try:
            found = model.get_input_embeddings()
        except (NotImplementedError, AttributeError):
            found = None
        if found is not None:
            return found
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            return module
    raise ConfigError(
        "analyzer.robustness",
        f"embedding-space attacks need an nn.Embedding input layer; "
        f"{type(model).__name__} has none (set fgsm.eps and pgd.eps to [])",
    )


class EmbeddingShift:
    """While active, ``module``'s output becomes ``output + delta`` (``delta`` None = unchanged).

    ``within``: shift only the calls made inside that module's forward (a seq2seq model's encoder,
    whose token embedding its decoder shares), so the decoder's inputs stay clean."""

    def __init__(self, module: nn.Module, within: nn.Module | None = None):
        self.module, self.within = module, within
        self.delta: torch.Tensor | None = None
        self._handles: list = []
        self._inside = within is None

    def _hook(self, _module, _inputs, output):
        if self.delta is None or not self._inside:
            return output
        return output + self.delta.to(output.dtype)

    def _enter_scope(self, *_args, **_kwargs):
        self._inside = True

    def _leave_scope(self, *_args, **_kwargs):
        self._inside = False

    def __enter__(self) -> EmbeddingShift:
        self._handles = [self.module.register_forward_hook(self._hook)]
        if self.within is not None:
            self._inside = False
            self._handles.append(self.within.register_forward_pre_hook(self._enter_scope))
            self._handles.append(self.within.register_forward_hook(self._leave_scope))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.delta = None


@contextmanager
def frozen(model: nn.Module):
    """Parameters stop requiring grad (input gradients only: no weight-gradient work), then restored."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        yield model
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)
