"""Reference outputs of the model under analysis, computed once and compared against many variants
(quantized, noisy, perturbed, attacked): loss, top-1 agreement and KL(reference || variant)."""

from __future__ import annotations

import torch
from torch import nn

from modelxray.core.progress import bar
from modelxray.measure.scoring import forward_logits, model_device
from modelxray.metrics.lm import LMScore, divergence_at, divergence_summary, ratio_se
from modelxray.metrics.windows import IGNORE, NamedTensors, Window, batched


class Reference:
    """Holds the reference argmax for every scored token and the reference log-probabilities of the
    scored positions of the first ``kl_windows`` windows (scored tokens x vocab floats: the memory
    cost of exact KL; a masked LM keeps its masked tokens only, a text classifier one row per text)."""

    def __init__(
        self,
        model: nn.Module,
        windows: list[Window],
        batch_size: int,
        kl_windows: int,
        progress: bool = False,
        desc: str = "reference",
    ):
        self._begin(list(batched(windows, batch_size)), batch_size, model_device(model))
        with torch.inference_mode():
            for i, (inputs, targets) in enumerate(bar(self.batches, desc=desc, enabled=progress)):
                self.add(i, forward_logits(model, inputs.to(self.device)), targets.to(self.device), kl_windows)
        self.finish()

    @classmethod
    def collecting(cls, batches: list, batch_size: int, device: torch.device | None = None) -> Reference:
        """An empty reference over ``batches`` (``metrics.windows.batched``), filled batch by batch with
        ``add`` from logits computed elsewhere (a model streamed block by block), then ``finish``."""
        ref = cls.__new__(cls)
        ref._begin(batches, batch_size, device or torch.device("cpu"))
        return ref

    def _begin(self, batches: list, batch_size: int, device: torch.device) -> None:
        self.batches = batches
        self.batch_size = batch_size
        self.device = device
        self.argmax: list[torch.Tensor] = []
        # per batch: the scored positions of its first rows, and their log-probabilities (N, vocab)
        self.logprobs: list[tuple[torch.Tensor, torch.Tensor] | None] = []
        self._scores: list[LMScore] = []  # per window, for the reference metrics of any prefix of windows
        self.vocab_size = 0
        self._seen = 0

    def add(self, index: int, logits: torch.Tensor, targets: torch.Tensor, kl_windows: int) -> None:
        """Take batch ``index``'s logits (batches in order): its per-window scores, argmax and, on the
        first ``kl_windows`` windows, its log-probabilities."""
        assert index == len(self.argmax), "batches are added in order"
        self.vocab_size = logits.shape[-1]
        for row in range(logits.shape[0]):
            score = LMScore(ks=[1])
            score.update(logits[row : row + 1], targets[row : row + 1])
            self._scores.append(score)
        self.argmax.append(logits.argmax(-1))
        keep = max(0, min(logits.shape[0], kl_windows - self._seen))
        scored = targets[:keep] != IGNORE
        self.logprobs.append((scored, torch.log_softmax(logits[:keep][scored].float(), -1)) if keep else None)
        self._seen += logits.shape[0]

    def finish(self) -> None:
        self.metrics = self.metrics_of(None)
        self.label = "the unquantized model"  # what the reports call it

    def state(self) -> dict:
        """Everything a comparison needs, as tensors and plain values (``torch.save`` with
        ``weights_only`` loading): a reference computed once is read back by ``from_state``."""
        return {
            "batches": [(_portable(inputs), targets) for inputs, targets in self.batches],
            "batch_size": self.batch_size,
            "argmax": self.argmax,
            "logprobs": self.logprobs,
            "window_stats": self.window_stats(),
            "vocab_size": self.vocab_size,
            "label": self.label,
        }

    @classmethod
    def from_state(cls, state: dict, device: torch.device | None = None) -> Reference:
        """The reference ``state()`` saved, on ``device`` (the model under analysis's)."""
        ref = cls.__new__(cls)
        device = device or torch.device("cpu")
        ref.batches = [(_restored(inputs), targets) for inputs, targets in state["batches"]]
        ref.batch_size = int(state["batch_size"])
        ref.device = device
        ref.argmax = [a.to(device) for a in state["argmax"]]
        ref.logprobs = [
            None if kept is None else (kept[0].to(device), kept[1].to(device)) for kept in state["logprobs"]
        ]
        ref._scores = []
        for row in state["window_stats"]:
            score = LMScore(ks=[1], nll_sum=float(row[0]), n_tokens=int(row[1]), hits={1: int(row[2])})
            score.windows.append(row[None].clone())
            ref._scores.append(score)
        ref.vocab_size = int(state["vocab_size"])
        ref.label = str(state["label"])
        ref.metrics = ref.metrics_of(None)
        return ref

    def same_tokens(self, windows: list[Window]) -> str | None:
        """None when ``windows`` are the ones this reference scored (same inputs and targets, same
        batches), else what differs, in words."""
        mine = list(batched(windows, self.batch_size))
        if len(mine) != len(self.batches):
            return f"{sum(int(t.shape[0]) for _, t in mine)} windows here, {self.n_windows} for the reference"
        for i, ((a, ta), (b, tb)) in enumerate(zip(mine, self.batches, strict=True)):
            if a.shape != b.shape or not _equal(a, b) or not torch.equal(ta.cpu(), tb.cpu()):
                where = ""
                if a.shape == b.shape and isinstance(a, torch.Tensor):
                    flat = (a.cpu() != b.cpu()).flatten().nonzero()
                    if flat.numel():
                        where = f" (first at token {int(flat[0]) + i * self.batch_size * a.shape[-1]:,})"
                return f"the token ids differ in batch {i}{where}"
        return None

    @property
    def n_windows(self) -> int:
        return sum(int(t.shape[0]) for _, t in self.batches)

    def metrics_of(self, max_batches: int | None = None, max_windows: int | None = None) -> dict[str, float]:
        """The reference's own metrics over the first ``max_batches`` batches or ``max_windows`` windows
        (all when both are None)."""
        n = max_windows if max_windows is not None else (max_batches * self.batch_size if max_batches else None)
        total = LMScore(ks=[1])
        for s in self._scores[:n] if n else self._scores:
            total.merge(s)
        return {
            **total.result(),
            "top1_agree": 1.0,
            "top1_agree_se": 0.0,
            "kl": 0.0,
            "kl_se": 0.0,
            "delta_loss": 0.0,
            "delta_loss_se": 0.0,
        }

    def window_stats(self) -> torch.Tensor:
        """(windows, 3): each scored window's summed NLL, scored tokens and top-1 hits, in order."""
        return torch.cat([s.per_window() for s in self._scores])

    def comparison(self, ks: list[int] | None = None) -> Comparison:
        return Comparison(self, ks)

    def evaluate(
        self, model: nn.Module, max_batches: int | None = None, progress: bool = False, desc: str = "evaluate"
    ) -> dict[str, float]:
        """loss, perplexity, accuracy and, against the reference, top1_agree and kl (on kl windows)."""
        return self.compare(model, max_batches, progress, desc).result()

    def compare(
        self,
        model: nn.Module,
        max_batches: int | None = None,
        progress: bool = False,
        desc: str = "evaluate",
        ks: list[int] | None = None,
    ) -> Comparison:
        """The model's Comparison against the reference on the first ``max_batches`` batches (all by
        default), whose per-window scores stay available (``comp.score.per_window()``); ``ks``: the
        top-k accuracies its score keeps (top-1 by default)."""
        comp = Comparison(self, ks)
        device = model_device(model)  # a reference read back from disk compares with a model anywhere
        batches = self.batches[:max_batches] if max_batches else self.batches
        with torch.inference_mode():
            for i, (inputs, targets) in enumerate(bar(batches, desc=desc, enabled=progress)):
                comp.add(i, forward_logits(model, inputs.to(device)), targets.to(device))
        return comp


def _portable(inputs):
    """A batch's inputs as ``torch.load(weights_only=True)`` reads them back: a tensor, or the
    tensors of ``NamedTensors`` with the name of the primary one."""
    if isinstance(inputs, NamedTensors):
        return {"tensors": dict(inputs), "primary": inputs.primary}
    return inputs


def _restored(inputs):
    if isinstance(inputs, dict):
        named = NamedTensors(inputs["tensors"])
        named.primary = inputs["primary"]
        return named
    return inputs


def _equal(a, b) -> bool:
    """The same inputs: one tensor, or the same names holding the same tensors."""
    if isinstance(a, NamedTensors) or isinstance(b, NamedTensors):
        return (
            isinstance(a, NamedTensors)
            and isinstance(b, NamedTensors)
            and a.keys() == b.keys()
            and all(torch.equal(a[k].cpu(), b[k].cpu()) for k in a)
        )
    return torch.equal(a.cpu(), b.cpu())


class Comparison:
    """Accumulates a variant's logits, batch by batch, against the reference. A variant may score the
    first rows of a batch only, and may mark more targets ``IGNORE`` (e.g. tokens it replaced)."""

    def __init__(self, ref: Reference, ks: list[int] | None = None):
        self.ref = ref
        self.score = LMScore(ks=sorted({1, *(ks or [])}))
        self.agree = self.total = self.kl_n = 0
        self.kl_sum = 0.0
        self.agree_rows: list[torch.Tensor] = []  # per window: agreeing tokens, scored tokens
        self.kl_parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # per-token KL, dp, window
        self.windows_seen = 0

    def add(self, batch_index: int, logits: torch.Tensor, targets: torch.Tensor) -> None:
        rows = logits.shape[0]
        self.score.update(logits, targets)
        mask = targets != IGNORE
        same = (logits.argmax(-1) == self.ref.argmax[batch_index][:rows].to(logits.device)) & mask
        self.agree += int(same.sum())
        self.total += int(mask.sum())
        self.agree_rows.append(torch.stack([same.sum(1), mask.sum(1)], dim=1).double().cpu())
        ref = self.ref.logprobs[batch_index]
        if ref is not None:
            scored, logp = ref[0].to(logits.device), ref[1].to(logits.device)
            k = min(scored.shape[0], rows)
            both = mask[:k] & scored[:k]  # a variant may score fewer positions (tokens it replaced)
            # the rows of logp and of the logits compared, gathered a chunk at a time (no N x vocab copies)
            logp_rows = both[scored[:k]].nonzero().squeeze(1)
            logit_rows = both.reshape(-1).nonzero().squeeze(1)
            flat = logits[:k].reshape(-1, logits.shape[-1])
            kl, dp, win = divergence_at(logp, flat, both, logp_rows, logit_rows)
            self.kl_sum += float(kl.sum())
            self.kl_n += int(kl.numel())
            self.kl_parts.append((kl, dp, win + self.windows_seen))
        self.windows_seen += rows

    def result(self) -> dict[str, float]:
        out = self.score.result()
        out["top1_agree"] = self.agree / self.total if self.total else float("nan")
        out["kl"] = self.kl_sum / self.kl_n if self.kl_n else float("nan")
        if self.agree_rows:
            per = torch.cat(self.agree_rows)
            per = per[per[:, 1] > 0]
            out["top1_agree_se"] = ratio_se(per[:, 0], per[:, 1])
        if self.kl_parts:
            out.update(divergence_summary(*(torch.cat(p) for p in zip(*self.kl_parts))))
        out.update(self._paired_delta())
        return out

    def _paired_delta(self) -> dict[str, float]:
        """The variant's loss minus the reference's on the same tokens, ``delta_loss``, with its standard
        error from the per-window paired differences (windows as units): far tighter than the two
        losses' own errors, as both vary with the same text. Empty when the scored tokens differ
        (a perturbation that drops targets)."""
        mine = self.score.per_window()
        ref = self.ref.window_stats()[: mine.shape[0]]
        if mine.shape[0] == 0 or ref.shape != mine.shape or not torch.equal(ref[:, 1], mine[:, 1]):
            return {}
        diff = mine[:, 0] - ref[:, 0]
        delta = float(diff.sum() / mine[:, 1].sum())
        se = ratio_se(diff, mine[:, 1])
        return {"delta_loss": delta, "delta_loss_se": se}
