"""Language-model quality metrics computed from logits and targets."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from modelxray.metrics.windows import IGNORE

_CHUNK = 128  # CPU: tokens per chunk, which keeps a chunk's logits (128 x vocab floats) in cache between passes
# a GPU: float32 logits per chunk; few large chunks (each a handful of kernel launches), no host sync
_DEVICE_CHUNK_BYTES = 256 * 2**20


def batch_token_stats(
    logits: torch.Tensor, targets: torch.Tensor, ks: list[int], chunk: int | None = None
) -> tuple[float, int, dict[int, int], torch.Tensor]:
    """``batch_token_sums`` read back to the host: summed NLL, scored tokens, top-k hits by k, and
    the (B, 4) per-row sums."""
    return host_stats(ks, *batch_token_sums(logits, targets, ks, chunk))


def host_stats(
    ks: list[int], hits: torch.Tensor, per_row: torch.Tensor
) -> tuple[float, int, dict[int, int], torch.Tensor]:
    """Sums made on any device, on the host: summed NLL, scored tokens, hits by k, per-row sums."""
    per_row, hits_k = per_row.cpu(), hits.tolist()
    totals = per_row.sum(0)
    return float(totals[0]), int(totals[1]), dict(zip(ks, hits_k)), per_row


def batch_token_sums(
    logits: torch.Tensor, targets: torch.Tensor, ks: list[int], chunk: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch's top-k hit counts (one per k, int64) and per row (sequence) its summed NLL (nats),
    scored tokens, top-1 hits and summed squared NLL as a (B, 4) float64 tensor, both left on the
    logits' device: reading them back waits for the GPU, which a caller does once, not per batch.

    ``logits`` (B, T, V), ``targets`` (B, T) with ``IGNORE`` where not scored. Works through the
    tokens in chunks so that the cross-entropy and top-k passes read each chunk from cache: on a
    49k vocabulary this is 6x faster than whole-tensor passes (``scripts/bench_eval.py``). Top-k
    ties are broken by ``torch.topk``'s order. On a GPU the chunks are as large as
    ``_DEVICE_CHUNK_BYTES`` allows and none is skipped (skipping one would wait on the GPU to learn
    whether it holds a scored token); ``chunk`` sets the tokens per chunk.
    """
    rows_n, steps = targets.shape[0], targets.shape[-1]
    vocab = logits.shape[-1]
    flat, tgt = logits.reshape(-1, vocab), targets.reshape(-1)
    kmax = min(max(ks), vocab)
    device = logits.device  # sums stay beside the logits (a GPU's): one copy to the host at the end
    on_cpu = device.type == "cpu"
    if chunk is None:
        chunk = _CHUNK if on_cpu else max(_CHUNK, _DEVICE_CHUNK_BYTES // (4 * vocab))
    hits = torch.zeros(len(ks), dtype=torch.int64, device=device)
    per_row = torch.zeros(
        rows_n, 4, dtype=torch.float64, device=device
    )  # nll, tokens, top-1 hits, nll^2 of each sequence
    positions = torch.arange(flat.shape[0], device=device)
    for start in range(0, flat.shape[0], chunk):
        x, y = flat[start : start + chunk], tgt[start : start + chunk]
        row = positions[start : start + chunk] // steps
        mask = y != IGNORE
        if on_cpu and not bool(mask.any()):
            continue
        # every position of the chunk goes through (no copy of the scored ones): a position not
        # scored has NLL 0 and matches no index, so it adds nothing but its zeros
        x = x.float()
        nll = F.cross_entropy(x, y, reduction="none", ignore_index=IGNORE).double()
        found = x.topk(kmax, dim=1).indices == y.unsqueeze(1)  # (N, kmax), at most one True per row
        hits += torch.stack([found[:, :k].sum() for k in ks])
        stats = torch.stack([nll, mask.double(), found[:, 0].double(), nll * nll], dim=1)
        per_row.index_add_(0, row, stats)
    return hits, per_row


def ratio_se(numerators: torch.Tensor, denominators: torch.Tensor) -> float:
    """Standard error of the ratio estimate sum(numerators) / sum(denominators) with the units (windows)
    as independent draws: sqrt(m / (m - 1) * sum((a_i - r * n_i)^2)) / sum(n_i), the linearised
    (cluster-robust) variance. Tokens inside a window are correlated, so the window is the unit; NaN
    with fewer than two units."""
    m = int(numerators.numel())
    total = float(denominators.sum())
    if m < 2 or total <= 0:
        return math.nan
    r = float(numerators.sum()) / total
    resid = numerators.double() - r * denominators.double()
    return math.sqrt(m / (m - 1) * float((resid**2).sum())) / total


class LMScore:
    """Accumulates batch statistics into loss, perplexity, bits per byte and top-k accuracy, and keeps
    each window's sums so that the loss and the accuracy carry a standard error (windows as units).

    A batch's sums stay on its device until a figure is read (``n_tokens``, ``result()``...): then all
    of them come back in one copy. On a GPU the next batch's forward is queued while this one runs,
    where a read-back per batch would leave the GPU idle while the host queues the next."""

    def __init__(
        self,
        ks: list[int],
        nll_sum: float = 0.0,
        n_tokens: int = 0,
        hits: dict[int, int] | None = None,
        nll_sq_sum: float = 0.0,  # summed squared token NLL: the per-token standard error llama.cpp reports
    ):
        self.ks = ks
        self._nll_sum, self._n_tokens, self._hits, self._nll_sq_sum = nll_sum, n_tokens, dict(hits or {}), nll_sq_sum
        self._windows: list[torch.Tensor] = []  # (B, 3) per batch: nll, n, hits of each scored window
        self._pending: list[tuple[torch.Tensor, torch.Tensor]] = []  # (hits, per_row) not yet read back

    def __repr__(self) -> str:
        return f"LMScore(ks={self.ks}, nll_sum={self.nll_sum}, n_tokens={self.n_tokens}, hits={self.hits})"

    def update(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        self._pending.append(batch_token_sums(logits, targets, self.ks))

    def settle(self) -> None:
        """Read the pending batches' sums back to the host in one copy and add them."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        hits = torch.stack([h for h, _ in pending]).sum(0)
        per_row = torch.cat([r for _, r in pending])
        nll, n, by_k, per_row = host_stats(self.ks, hits, per_row)
        self._nll_sum += nll
        self._n_tokens += n
        for k, h in by_k.items():
            self._hits[k] = self._hits.get(k, 0) + h
        self._nll_sq_sum += float(per_row[:, 3].sum())
        self._windows.append(per_row[per_row[:, 1] > 0][:, :3])

    @property
    def nll_sum(self) -> float:
        self.settle()
        return self._nll_sum

    @property
    def n_tokens(self) -> int:
        self.settle()
        return self._n_tokens

    @property
    def hits(self) -> dict[int, int]:
        self.settle()
        return self._hits

    @property
    def nll_sq_sum(self) -> float:
        self.settle()
        return self._nll_sq_sum

    @property
    def windows(self) -> list[torch.Tensor]:
        self.settle()
        return self._windows

    def merge(self, other: LMScore) -> None:
        """Add another score's tokens and windows to this one (same ``ks``)."""
        self.settle()
        self._nll_sum += other.nll_sum
        self._n_tokens += other.n_tokens
        self._nll_sq_sum += other.nll_sq_sum
        for k, h in other.hits.items():
            self._hits[k] = self._hits.get(k, 0) + h
        self._windows.extend(other.windows)

    def per_window(self) -> torch.Tensor:
        """(windows, 3): each scored window's summed NLL, scored tokens and top-1 hits."""
        return torch.cat(self.windows) if self.windows else torch.zeros(0, 3, dtype=torch.float64)

    def result(self, n_bytes: int | None = None) -> dict[str, float]:
        if self.n_tokens == 0:
            raise ValueError("no token was scored: the dataset is shorter than two tokens")
        loss = self.nll_sum / self.n_tokens
        out = {"loss": loss, "perplexity": perplexity(loss), "tokens_scored": float(self.n_tokens)}
        for k in self.ks:
            out["accuracy" if k == 1 else f"top{k}_accuracy"] = self.hits.get(k, 0) / self.n_tokens
        if n_bytes:
            out["bits_per_byte"] = bits_per_byte(self.nll_sum, n_bytes)
        w = self.per_window()
        out["windows_scored"] = float(w.shape[0])
        out["loss_se"] = ratio_se(w[:, 0], w[:, 1])
        if self.nll_sq_sum > 0 and self.n_tokens > 1:  # tokens as independent draws, as llama.cpp's perplexity tool
            var = (self.nll_sq_sum / self.n_tokens - loss * loss) * self.n_tokens / (self.n_tokens - 1)
            out["loss_se_per_token"] = math.sqrt(max(var, 0.0) / self.n_tokens)
        if 1 in self.ks:
            out["accuracy_se"] = ratio_se(w[:, 2], w[:, 1])
        return out


def perplexity(mean_nll_nats: float) -> float:
    """exp of the mean token negative log-likelihood (inf when it overflows)."""
    try:
        return math.exp(mean_nll_nats)
    except OverflowError:
        return math.inf


def bits_per_byte(nll_sum_nats: float, n_bytes: int) -> float:
    """Total negative log-likelihood in bits divided by the UTF-8 bytes it covers."""
    return nll_sum_nats / (math.log(2) * n_bytes)


def token_divergence(
    ref_logprobs: torch.Tensor, logits: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per scored position (``mask`` (B, T)): KL(reference || model) in nats, the change in the
    probability of the reference's top token (model minus reference), and the row (window) it is
    in; float64 on the CPU, in row-major order."""
    return divergence_at(ref_logprobs[mask], logits[mask], mask)


def divergence_at(
    logp: torch.Tensor,
    logits: torch.Tensor,
    mask: torch.Tensor,
    logp_rows: torch.Tensor | None = None,
    logit_rows: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``token_divergence`` from the reference log-probabilities and the model's logits already
    gathered at the positions of ``mask`` (N, V each, row-major): what a reference that keeps only
    its scored positions (a masked LM's masked tokens, a classifier's one label) compares with.

    ``logp_rows`` / ``logit_rows``: the rows of ``logp`` / ``logits`` to compare (indices, in order),
    when these are not gathered yet: each chunk is gathered as it is compared. Positions go through
    in chunks of ``KL_CHUNK`` (``divergence_spans``), so the pass holds a few chunk x vocab floats
    beside the logits, not several N x V tensors; each position's figures are those of one pass."""
    n = int(logp.shape[0] if logp_rows is None else logp_rows.shape[0])
    kl, dp = [], []
    for a, b in divergence_spans(n):
        p = logp[a:b] if logp_rows is None else logp.index_select(0, logp_rows[a:b])
        q = logits[a:b] if logit_rows is None else logits.index_select(0, logit_rows[a:b])
        chunk_kl, chunk_dp = _divergence(p, q)
        kl.append(chunk_kl)
        dp.append(chunk_dp)
    rows = torch.arange(mask.shape[0], device=mask.device)[:, None].expand_as(mask)[mask]
    return torch.cat(kl).double().cpu(), torch.cat(dp).double().cpu(), rows.cpu()


KL_CHUNK = 16  # positions per chunk of the KL pass (16 x a 49k vocabulary: 3 MiB per temporary)


def divergence_spans(n: int, size: int = KL_CHUNK) -> list[tuple[int, int]]:
    """Row ranges of at most ``size`` rows covering ``n`` rows (one empty range when ``n`` is 0), none of
    a single row unless ``n`` is 1: torch sums a lone long row in two halves on two threads, and rows
    of a many-row tensor each whole, so a one-row chunk would change the last bits of its figures."""
    spans = [(a, min(a + size, n)) for a in range(0, n, size)] or [(0, 0)]
    if len(spans) > 1 and spans[-1][1] - spans[-1][0] == 1:
        spans[-2:] = [(spans[-2][0], n)]
    return spans


def _divergence(logp: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """KL(reference || model) and the change of the reference top token's probability, per row."""
    logq = torch.log_softmax(logits.float(), dim=-1)
    kl = (logp.exp() * (logp - logq)).sum(-1).clamp_min(0.0)
    top = logp.argmax(-1, keepdim=True)
    dp = logq.gather(-1, top).exp() - logp.gather(-1, top).exp()
    return kl, dp.squeeze(-1)


def divergence_summary(kl: torch.Tensor, dp: torch.Tensor, rows: torch.Tensor) -> dict[str, float]:
    """llama.cpp's KL report: mean KL with its standard error (windows as units), its 90/99/99.9th
    percentiles and maximum, and the RMS change of the reference top token's probability."""
    if kl.numel() == 0:
        return {}
    windows = torch.unique(rows, return_inverse=True)[1]
    m = int(windows.max()) + 1
    sums = torch.zeros(m, dtype=torch.float64, device=kl.device).index_add_(0, windows, kl)
    counts = torch.zeros(m, dtype=torch.float64, device=kl.device).index_add_(0, windows, torch.ones_like(kl))
    q = torch.quantile(kl, torch.tensor([0.9, 0.99, 0.999], dtype=kl.dtype, device=kl.device))
    return {
        "kl_se": ratio_se(sums, counts),
        "kl_p90": float(q[0]),
        "kl_p99": float(q[1]),
        "kl_p999": float(q[2]),
        "kl_max": float(kl.max()),
        "rms_dp": float(dp.pow(2).mean().sqrt()),
    }


def kl_and_agreement(ref_logprobs: torch.Tensor, logits: torch.Tensor, mask: torch.Tensor) -> tuple[float, int, int]:
    """Summed KL(reference || model) in nats, and the count of tokens whose top-1 prediction agrees,
    over the positions in ``mask`` (B, T). ``ref_logprobs`` are the reference log-softmax (B, T, V)."""
    logq = torch.log_softmax(logits[mask].float(), dim=-1)
    logp = ref_logprobs[mask]
    kl = (logp.exp() * (logp - logq)).sum(-1)
    agree = (logp.argmax(-1) == logq.argmax(-1)).sum()
    return float(kl.sum()), int(agree), int(mask.sum())
