"""Input-token perturbations of a language model's evaluation windows.

* Dropout deletes each token of the evaluated text with probability ``rate`` and re-scores what is
  left, re-cut into windows: the model reads a text with holes, as after lossy transcription.
  Rate 0 gives the clean windows back; rate 1 leaves nothing to score.
* Substitution replaces each input token with probability ``rate`` by a uniformly random token id;
  targets that were replaced are not scored (predicting random noise is not the question), so the
  scored positions line up with the clean ones and top-1 agreement and KL stay meaningful.
"""

from __future__ import annotations

import torch

from modelxray.metrics.windows import IGNORE, Window, disjoint_windows


def drop_tokens(ids: torch.Tensor, rate: float, generator: torch.Generator) -> torch.Tensor:
    """The tokens of 1-D ``ids`` that survive deletion with probability ``rate``, in order."""
    keep = torch.rand(ids.shape, generator=generator) >= rate
    return ids[keep]


def dropout_windows(windows: list[Window], rate: float, generator: torch.Generator) -> list[Window]:
    """Disjoint windows of the same length over the text of ``windows`` after token dropout."""
    if not windows:
        return []
    stream = torch.cat([w.inputs for w in windows])
    return disjoint_windows(drop_tokens(stream, rate, generator), windows[0].inputs.numel())


def substitute_window(window: Window, rate: float, vocab_size: int, generator: torch.Generator) -> Window:
    """``window`` with inputs replaced at ``rate`` by random ids; targets that are replaced inputs
    (the next position's input) become IGNORE."""
    replaced = torch.rand(window.inputs.shape, generator=generator) < rate
    random_ids = torch.randint(0, vocab_size, window.inputs.shape, generator=generator)
    inputs = torch.where(replaced, random_ids, window.inputs)
    targets = window.targets.clone()
    targets[:-1][replaced[1:]] = IGNORE
    return Window(inputs, targets)
