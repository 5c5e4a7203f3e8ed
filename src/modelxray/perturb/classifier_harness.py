"""Evaluate perturbations of a classifier against its clean outputs, computed once.

Inputs are attacked in input space inside the data's feature range (pixels stay valid), and every
family is scored the same way: loss, accuracy, top-1 agreement with the clean predictions and
KL(clean || perturbed), averaged over samples. Image data (``image_shape``, e.g. the flat 64 pixels
of the digits as (1, 8, 8)) can also be corrupted as images: reshaped, corrupted, flattened back."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from modelxray.core.progress import bar
from modelxray.perturb.attacks import default_step_size, fgsm, pgd
from modelxray.perturb.embedding_shift import frozen
from modelxray.perturb.images import gaussian_blur, gaussian_noise, occlude, patch_positions

IMAGE_FAMILIES = ("gaussian_noise", "blur", "occlusion")
OCCLUSION_FILLS = ("mid", "low")  # the middle of the feature range (grey) | its bottom (black)


class ClassifierHarness:
    quality = "accuracy"
    dropout_family = "feature_dropout"
    substitution_family = "feature_substitution"

    def __init__(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        feature_range: tuple[float, float],
        batch_size: int,
        progress: bool = True,
        image_shape: tuple[int, int, int] | None = None,
        occlusion_fill: str = "mid",
    ):
        self.model, self.batch_size, self.progress = model, batch_size, progress
        self.device = next(model.parameters()).device
        self.x, self.y = x.to(self.device), y.to(self.device)
        self.bounds = (float(feature_range[0]), float(feature_range[1]))
        self.size = int(y.numel())
        self.image_shape = tuple(image_shape) if image_shape is not None else None
        if self.image_shape is not None and (len(self.image_shape) != 3 or math.prod(self.image_shape) != x[0].numel()):
            raise ValueError(f"image_shape {self.image_shape} does not hold the {x[0].numel()} features of a sample")
        if occlusion_fill not in OCCLUSION_FILLS:
            raise ValueError(f"occlusion_fill must be one of {OCCLUSION_FILLS}; got {occlusion_fill!r}")
        self.occlusion_fill = occlusion_fill
        with torch.inference_mode():
            self.clean_logp = torch.cat([F.log_softmax(self._forward(xb).float(), -1) for xb in self._chunks(self.x)])
        self.clean = self._score(self.clean_logp, reference=None)

    @property
    def eps_scale(self) -> float:
        """Attack radii are fractions of the feature range (1.0 for pixels in [0, 1])."""
        return self.bounds[1] - self.bounds[0]

    def clean_of(self, n: int) -> dict[str, float]:
        return self._score(self.clean_logp[:n], reference=None, n=n)

    # -- scoring ----------------------------------------------------------------------------------
    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x.to(dtype=next(self.model.parameters()).dtype))

    def _chunks(self, t: torch.Tensor):
        return [t[i : i + self.batch_size] for i in range(0, t.shape[0], self.batch_size)]

    def _score(self, logp: torch.Tensor, reference: torch.Tensor | None, n: int | None = None) -> dict[str, float]:
        n = logp.shape[0] if n is None else n
        y = self.y[:n]
        out = {
            "loss": float(F.nll_loss(logp, y)),
            "accuracy": float((logp.argmax(-1) == y).float().mean()),
            "samples": float(n),
        }
        if reference is not None:
            ref = reference[:n]
            out["top1_agree"] = float((logp.argmax(-1) == ref.argmax(-1)).float().mean())
            out["kl"] = float(F.kl_div(logp, ref, log_target=True, reduction="batchmean"))
        return out

    def _compare(self, x: torch.Tensor, n: int | None = None) -> dict[str, float]:
        with torch.inference_mode():
            logp = torch.cat([F.log_softmax(self._forward(xb).float(), -1) for xb in self._chunks(x)])
        return self._score(logp, self.clean_logp, n)

    # -- attacks in input space -------------------------------------------------------------------
    def attack(
        self,
        eps_list: list[float],
        steps: int,
        step_size: float | None,
        random_start: bool,
        generator: torch.Generator,
        n_samples: int,
        desc: str,
    ) -> dict[float, dict[str, dict]]:
        """FGSM (and PGD when ``steps`` > 0) at each eps on the first ``n_samples`` samples, maximising
        the cross-entropy; the gradient at the clean point is shared by every eps and PGD's first step."""
        scale = self.eps_scale
        x_all, y_all = self.x[:n_samples], self.y[:n_samples]
        adv_f = {e: [] for e in eps_list}
        adv_p = {e: [] for e in eps_list}
        with frozen(self.model), bar(total=n_samples, desc=desc, unit="sample", enabled=self.progress) as pbar:
            for xb, yb in zip(self._chunks(x_all), self._chunks(y_all)):
                grad_fn = self._grad_fn(yb)
                g0 = grad_fn(xb)
                for eps in eps_list:
                    e = eps * scale
                    adv_f[eps].append(fgsm(xb, g0, e, self.bounds))
                    if steps > 0:
                        size = (step_size * e) if step_size else default_step_size(e, steps)
                        adv_p[eps].append(
                            pgd(xb, grad_fn, e, steps, size, random_start, generator, self.bounds, first_grad=g0)
                        )
                pbar.update(xb.shape[0])
        out = {}
        for eps in eps_list:
            out[eps] = {"fgsm": self._compare(torch.cat(adv_f[eps]), n_samples)}
            if steps > 0:
                out[eps]["pgd"] = self._compare(torch.cat(adv_p[eps]), n_samples)
        return out

    def _grad_fn(self, y: torch.Tensor):
        def grad(x: torch.Tensor) -> torch.Tensor:
            x = x.detach().requires_grad_(True)
            with torch.enable_grad():
                loss = F.cross_entropy(self._forward(x).float(), y)
                (g,) = torch.autograd.grad(loss, x)
            return g

        return grad

    # -- the model as it is now (after weight noise) ----------------------------------------------
    def evaluate(self, desc: str) -> dict[str, float]:
        return self._compare(self.x)

    # -- input perturbations ----------------------------------------------------------------------
    def perturb_inputs(self, family: str, rate: float, generator: torch.Generator, desc: str) -> dict[str, float]:
        """An image corruption (``IMAGE_FAMILIES``, ``rate`` its level: see ``corrupted``), or
        ``feature_dropout``: each feature set to the bottom of the range (a blank pixel) with
        probability ``rate``; ``feature_substitution``: replaced by a uniform random value in range."""
        if family in IMAGE_FAMILIES:
            return self._compare_batches(self.corrupted(family, rate, generator))
        lo, hi = self.bounds
        mask = (torch.rand(self.x.shape, generator=generator) < rate).to(self.device)
        if family == self.dropout_family:
            x = self.x.masked_fill(mask, lo)
        else:
            noise = (torch.rand(self.x.shape, generator=generator) * (hi - lo) + lo).to(self.device, self.x.dtype)
            x = torch.where(mask, noise, self.x)
        return self._compare(x)

    # -- image corruptions ------------------------------------------------------------------------
    @property
    def occlusion_value(self) -> float:
        lo, hi = self.bounds
        return (lo + hi) / 2 if self.occlusion_fill == "mid" else lo

    def corrupted(self, family: str, level: float, generator: torch.Generator):
        """The test inputs under an image corruption, batch by batch (one batch in memory at a time),
        each shaped as the inputs are: ``gaussian_noise`` (sigma in pixel units, clipped to the
        range), ``blur`` (Gaussian, sigma in pixels, symmetric reflection padding: means kept),
        ``occlusion`` (a patch of ``level`` x the image side at a seeded random place per image, set
        to ``occlusion_value``). Random draws come from ``generator`` in batch order."""
        if self.image_shape is None:
            raise ValueError(f"{family}: the inputs are feature vectors, not images (no image_shape)")
        if family not in IMAGE_FAMILIES:
            raise ValueError(f"unknown image corruption {family!r}; expected one of {IMAGE_FAMILIES}")
        c, h, w = self.image_shape
        corners = patch_positions(self.size, h, w, level, generator) if family == "occlusion" else None
        return self._corrupted(family, level, generator, corners)

    def _corrupted(self, family, level, generator, corners):
        c, h, w = self.image_shape
        start = 0
        for xb in self._chunks(self.x):
            img = xb.reshape(-1, c, h, w)
            if family == "gaussian_noise":
                img = gaussian_noise(img, level, generator, self.bounds)
            elif family == "blur":
                img = gaussian_blur(img, level).clamp(*self.bounds) if level else img
            else:
                img = occlude(img, level, corners[start : start + xb.shape[0]], self.occlusion_value)
            start += xb.shape[0]
            yield img.reshape(xb.shape)

    def _compare_batches(self, batches) -> dict[str, float]:
        """``_compare`` of inputs that arrive batch by batch, in order."""
        with torch.inference_mode():
            logp = torch.cat([F.log_softmax(self._forward(xb).float(), -1) for xb in batches])
        return self._score(logp, self.clean_logp)
