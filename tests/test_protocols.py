"""The performance analyzer's perplexity equals independent plain loops under each protocol."""

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from modelxray.analyzers.performance import PerformanceAnalyzer
from modelxray.core.result import RunContext
from modelxray.core.subject import Subject
from modelxray.data.pydoc_topics import PydocTopics
from modelxray.models.tiny_gpt2 import TinyGPT2Source


@pytest.fixture(scope="module")
def subject(tmp_path_factory):
    loaded = TinyGPT2Source(device="cpu", seed=5).load()
    data = PydocTopics(seq_len=64, max_tokens=1000, cache_dir=str(tmp_path_factory.mktemp("c"))).load(loaded.tokenizer)
    return Subject(loaded.model, loaded.tokenizer, data, loaded.info)


def _run(subject, **kw):
    analyzer = PerformanceAnalyzer(speed_batch_sizes=[1], iters=1, warmup=0, layer_timing=False, **kw)
    return analyzer.run(subject, RunContext(output_dir=Path("."), progress=False)).metrics


def test_disjoint_matches_plain_loop(subject):
    ids, T = subject.data.ids, 64
    nll, n = 0.0, 0
    with torch.no_grad():
        for s in range(0, ids.numel(), T):
            w = ids[s : s + T].unsqueeze(0)
            if w.numel() < 2:
                continue
            logits = subject.model(w).logits
            nll += float(F.cross_entropy(logits[0, :-1], w[0, 1:], reduction="sum"))
            n += w.numel() - 1
    m = _run(subject, protocol="disjoint", batch_size=3)
    assert m["tokens_scored"] == n
    assert m["perplexity"] == pytest.approx(math.exp(nll / n), rel=1e-5)


def _lm_eval_rolling_windows(tokens, prefix, max_len):
    """lm-evaluation-harness get_rolling_token_windows(context_len=1) + make_disjoint_window, re-derived."""

    def rolling():
        pred_len, predicted = max_len, 0
        first = min(max_len, len(tokens))
        yield [prefix] + tokens[: first - 1], tokens[:first]
        predicted += first
        while predicted < len(tokens):
            wlen = min(len(tokens) - predicted, pred_len)
            end = predicted + wlen
            yield tokens[end - max_len - 1 : end - 1], tokens[end - wlen : end]
            predicted += wlen

    for ctx, cont in rolling():
        yield ctx[: len(ctx) - (len(cont) - 1)], cont


def test_lm_eval_rolling_matches_harness_protocol(subject):
    tokens, bos = subject.data.ids.tolist(), subject.tokenizer.bos_token_id
    nll, n = 0.0, 0
    with torch.no_grad():
        for ctx, cont in _lm_eval_rolling_windows(tokens, bos, 64):
            inp = torch.tensor([(ctx + cont)[:-1]])
            logits = subject.model(inp).logits[0, -len(cont) :]
            nll += float(F.cross_entropy(logits, torch.tensor(cont), reduction="sum"))
            n += len(cont)
    m = _run(subject, protocol="lm_eval_rolling")
    assert n == len(tokens) and m["tokens_scored"] == n
    assert m["perplexity"] == pytest.approx(math.exp(nll / n), rel=1e-5)
    # bits per byte is exact when every token is scored
    assert m["bits_per_byte"] == pytest.approx(nll / math.log(2) / subject.data.n_bytes, rel=1e-5)


def test_sliding_with_short_stride_lowers_perplexity_of_a_trained_pattern():
    # a model that copies the token from 8 positions back: more context never hurts it
    torch.manual_seed(0)
    ids = torch.arange(8).repeat(40)

    class Copy(torch.nn.Module):
        def forward(self, x):
            logits = torch.zeros(*x.shape, 8)
            logits.scatter_(2, ((x + 1) % 8).unsqueeze(-1), 10.0)
            return logits

    from modelxray.core.subject import ModelInfo
    from modelxray.data.base import TokenData

    subj = Subject(Copy(), None, TokenData("toy", ids, 320, 16, 320), ModelInfo("copy", "in-memory", "float32"))
    a = _run(subj, protocol="disjoint", top_k=[1])
    b = _run(subj, protocol="sliding", stride=4, top_k=[1])
    assert a["accuracy"] == 1.0 and b["accuracy"] == 1.0
    assert b["tokens_scored"] == 319  # every token but the first, once
