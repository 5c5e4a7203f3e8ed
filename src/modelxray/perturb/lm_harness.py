"""Evaluate perturbations of a causal language model against its clean outputs, computed once.

Every family (attacks, weight noise, token perturbations) is scored by the same ``Comparison``
against one ``Reference`` pass: loss, perplexity, top-1 agreement with the clean predictions and
KL(clean || perturbed)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from modelxray.core.progress import bar
from modelxray.measure.reference import Reference
from modelxray.measure.scoring import forward_logits
from modelxray.metrics.lm import LMScore
from modelxray.metrics.windows import IGNORE, Window, batched
from modelxray.perturb.attacks import default_step_size, fgsm, pgd
from modelxray.perturb.embedding_shift import EmbeddingShift, frozen, input_embedding
from modelxray.perturb.tokens import dropout_windows, substitute_window


class LMHarness:
    quality = "perplexity"  # the headline metric of every family
    dropout_family = "token_dropout"
    substitution_family = "token_substitution"
    attack_space = "token embeddings"

    def __init__(
        self,
        model: nn.Module,
        windows: list[Window],
        batch_size: int,
        kl_windows: int,
        progress: bool = True,
        attack_batch_size: int = 1,
    ):
        self.model, self.windows, self.batch_size, self.progress = model, windows, batch_size, progress
        self.attack_batch_size = attack_batch_size
        self.ref = Reference(model, windows, batch_size, kl_windows, progress, "robustness: clean reference")
        self.clean = self.ref.metrics
        self._embedding: nn.Module | None = None
        self.size = len(windows)

    def perturb_inputs(self, family: str, rate: float, generator: torch.Generator, desc: str) -> dict[str, float]:
        if family == self.dropout_family:
            return self.token_dropout(rate, generator, desc)
        return self.token_substitution(rate, generator, desc)

    # -- attacks in embedding space -------------------------------------------------------------
    @property
    def embedding(self) -> nn.Module:
        if self._embedding is None:
            self._embedding = input_embedding(self.model)
        return self._embedding

    @property
    def eps_scale(self) -> float:
        """Attack radii are relative to the std of the input-embedding weights."""
        return float(self.embedding.weight.detach().float().std())

    shift_within = None  # the module inside which the embedding is shifted (None: every call)

    def token_shape(self, inputs) -> tuple[int, ...]:
        """(batch, tokens) of what the input embedding reads."""
        return tuple(inputs.shape)

    def clean_of(self, n_windows: int) -> dict[str, float]:
        return self.ref.metrics_of(max_windows=n_windows)

    attack_bounds = None  # the range the attacked input stays in (None: unbounded)
    attack_unit = "window"  # what the progress bar counts

    def attack(
        self,
        eps_list: list[float],
        steps: int,
        step_size: float | None,
        random_start: bool,
        generator: torch.Generator,
        n_windows: int,
        desc: str,
    ) -> dict[float, dict[str, dict]]:
        """FGSM (and PGD when ``steps`` > 0) at each relative eps (times ``eps_scale``) on the first
        ``n_windows`` windows, maximising the loss of their targets; what is attacked is the input
        that ``_attack_start`` and ``_attack_forward`` say (here an offset to the token embeddings).
        Returns {eps: {"fgsm": metrics, "pgd": metrics}}; the FGSM gradient at the clean point is
        computed once per batch and shared by every eps and PGD's first step."""
        scale, bounds = self.eps_scale, self.attack_bounds
        fg = {e: self.ref.comparison() for e in eps_list}
        pg = {e: self.ref.comparison() for e in eps_list} if steps > 0 else {}
        left = n_windows
        total = sum(min(b[0].shape[0], max(0, n_windows - i * self.batch_size)) for i, b in enumerate(self.ref.batches))
        with (
            frozen(self.model),
            self._attack_context() as ctx,
            bar(total=total, desc=desc, unit=self.attack_unit, enabled=self.progress) as pbar,
        ):
            for i, (inputs, targets) in enumerate(self.ref.batches):
                if left <= 0:
                    break
                rows = min(inputs.shape[0], left)
                left -= rows
                inputs, targets = inputs[:rows].to(self.ref.device), targets[:rows].to(self.ref.device)
                x0 = self._attack_start(inputs)
                grad_fn = self._grad_fn(ctx, inputs, targets)
                g0 = grad_fn(x0)
                for eps in eps_list:
                    e = eps * scale
                    fg[eps].add(i, self._logits(ctx, inputs, fgsm(x0, g0, e, bounds)), targets)
                    if steps > 0:
                        size = (step_size * e) if step_size else default_step_size(e, steps)
                        x = pgd(x0, grad_fn, e, steps, size, random_start, generator, bounds, first_grad=g0)
                        pg[eps].add(i, self._logits(ctx, inputs, x), targets)
                pbar.update(rows)
        return {e: {"fgsm": fg[e].result(), **({"pgd": pg[e].result()} if steps > 0 else {})} for e in eps_list}

    def _attack_context(self):
        """Entered around an attack, passed to ``_attack_forward``: here the embedding shift."""
        return EmbeddingShift(self.embedding, self.shift_within)

    def _attack_start(self, inputs) -> torch.Tensor:
        """The clean point of the attacked input: here a zero offset to the token embeddings."""
        return torch.zeros((*self.token_shape(inputs), self.embedding.weight.shape[1]), device=self.ref.device)

    def _attack_forward(self, shift: EmbeddingShift, inputs, delta: torch.Tensor) -> torch.Tensor:
        """The model's logits on ``inputs`` with the attacked input at ``delta``."""
        shift.delta = delta
        out = forward_logits(self.model, inputs)
        shift.delta = None
        return out

    def _logits(self, ctx, inputs, x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return self._attack_forward(ctx, inputs, x)

    def _grad_fn(self, ctx, inputs, targets: torch.Tensor):
        """x -> the gradient of the batch's mean loss over its scored targets with respect to the
        attacked input, computed ``attack_batch_size`` rows at a time (the backward keeps every
        layer's activations of the rows in flight): each part's summed loss over the batch's scored
        tokens, so the parts are exactly the rows of the whole batch's gradient."""
        scored = (targets != IGNORE).sum().clamp_min(1)
        step = self.attack_batch_size

        def grad(x: torch.Tensor) -> torch.Tensor:
            parts = []
            for start in range(0, x.shape[0], step):
                rows = slice(start, start + step)
                part = x[rows].detach().requires_grad_(True)
                with torch.enable_grad():
                    logits = self._attack_forward(ctx, inputs[rows], part).float()
                    loss = F.cross_entropy(
                        logits.reshape(-1, logits.shape[-1]),
                        targets[rows].reshape(-1),
                        ignore_index=IGNORE,
                        reduction="sum",
                    )
                    (g,) = torch.autograd.grad(loss / scored, part)
                parts.append(g)
            return torch.cat(parts)

        return grad

    # -- the model as it is now (after weight noise) ----------------------------------------------
    def evaluate(self, desc: str) -> dict[str, float]:
        return self.ref.evaluate(self.model, progress=self.progress, desc=desc)

    # -- input perturbations ----------------------------------------------------------------------
    def token_dropout(self, rate: float, generator: torch.Generator, desc: str) -> dict[str, float]:
        """Loss and perplexity on the text after dropout (positions no longer match the clean run,
        so there is no agreement or KL). Nothing left to score gives NaN metrics and 0 tokens."""
        windows = dropout_windows(self.windows, rate, generator)
        score = LMScore(ks=[1])
        with torch.inference_mode():
            for inputs, targets in bar(list(batched(windows, self.batch_size)), desc=desc, enabled=self.progress):
                score.update(forward_logits(self.model, inputs.to(self.ref.device)), targets.to(self.ref.device))
        if score.n_tokens == 0:
            return {"loss": float("nan"), "perplexity": float("nan"), "accuracy": float("nan"), "tokens_scored": 0.0}
        return score.result()

    def token_substitution(self, rate: float, generator: torch.Generator, desc: str) -> dict[str, float]:
        """Metrics on the targets that were not replaced, compared position by position with the clean run."""
        windows = [substitute_window(w, rate, self.ref.vocab_size, generator) for w in self.windows]
        comp = self.ref.comparison()
        with torch.inference_mode():
            for i, (inputs, targets) in enumerate(
                bar(list(batched(windows, self.batch_size)), desc=desc, enabled=self.progress)
            ):
                comp.add(i, forward_logits(self.model, inputs.to(self.ref.device)), targets.to(self.ref.device))
        if comp.score.n_tokens == 0:
            return {
                "loss": float("nan"),
                "perplexity": float("nan"),
                "accuracy": float("nan"),
                "tokens_scored": 0.0,
                "top1_agree": float("nan"),
                "kl": float("nan"),
            }
        return comp.result()
