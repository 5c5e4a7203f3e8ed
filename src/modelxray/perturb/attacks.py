"""FGSM and PGD under an L-infinity budget, on any differentiable input (pixels, or an offset added
to token embeddings). Written here rather than taken from torchattacks/ART because those assume an
image classifier taking the perturbed tensor as its only input; here the same two functions attack
a language model through an embedding offset and a classifier through its pixels."""

from __future__ import annotations

from collections.abc import Callable

import torch

Bounds = tuple[float, float] | None
GradFn = Callable[[torch.Tensor], torch.Tensor]  # x -> d loss / d x


def project(x: torch.Tensor, x0: torch.Tensor, eps: float, bounds: Bounds = None) -> torch.Tensor:
    """Closest point to ``x`` in the L-inf ball of radius ``eps`` around ``x0``, inside ``bounds``."""
    x = x0 + (x - x0).clamp(-eps, eps)
    return x.clamp(*bounds) if bounds is not None else x


def fgsm(x0: torch.Tensor, grad: torch.Tensor, eps: float, bounds: Bounds = None) -> torch.Tensor:
    """One signed-gradient step of size ``eps`` (Goodfellow et al., 2015); ``grad`` is taken at ``x0``."""
    return project(x0 + eps * grad.sign(), x0, eps, bounds)


def pgd(
    x0: torch.Tensor,
    grad_fn: GradFn,
    eps: float,
    steps: int,
    step_size: float,
    random_start: bool = False,
    generator: torch.Generator | None = None,
    bounds: Bounds = None,
    first_grad: torch.Tensor | None = None,
) -> torch.Tensor:
    """Projected gradient ascent (Madry et al., 2018): ``steps`` signed steps of ``step_size``, each
    projected back onto the eps-ball (and ``bounds``). ``first_grad`` reuses a gradient at ``x0``
    (the FGSM one) for the first step when there is no random start."""
    x = x0.clone()
    if random_start:
        noise = torch.rand(x0.shape, generator=generator, dtype=x0.dtype).to(x0.device) * 2 - 1
        x = project(x0 + eps * noise, x0, eps, bounds)
    for step in range(steps):
        g = first_grad if (step == 0 and first_grad is not None and not random_start) else grad_fn(x)
        x = project(x + step_size * g.sign(), x0, eps, bounds)
    return x


def default_step_size(eps: float, steps: int) -> float:
    """2.5 * eps / steps: lets PGD travel from the centre to the ball's surface and back (Madry et al.)."""
    return 2.5 * eps / steps
