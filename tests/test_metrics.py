"""Metric functions against hand computations and independent implementations."""

import math

import pytest
import torch
import torch.nn.functional as F

from modelxray.metrics.lm import LMScore, batch_token_stats, bits_per_byte, perplexity
from modelxray.metrics.tensor_bytes import count_parameters, tensor_bytes_by_dtype
from modelxray.metrics.windows import IGNORE


def test_uniform_logits_give_perplexity_equal_to_vocab_size():
    vocab = 97
    logits = torch.zeros(3, 16, vocab)
    targets = torch.randint(0, vocab, (3, 16))
    score = LMScore(ks=[1])
    score.update(logits, targets)
    assert score.result()["perplexity"] == pytest.approx(vocab, rel=1e-6)


def test_hand_computed_loss_on_two_tokens():
    # two scored tokens, vocab 3: p(target) = softmax([1,2,3])[2] and softmax([0,ln 2,ln 3])[0]
    logits = torch.tensor([[[1.0, 2.0, 3.0], [0.0, math.log(2.0), math.log(3.0)]]])
    targets = torch.tensor([[2, 0]])
    p1 = math.exp(3) / (math.exp(1) + math.exp(2) + math.exp(3))
    p2 = 1 / (1 + 2 + 3)
    expected = -(math.log(p1) + math.log(p2)) / 2
    score = LMScore(ks=[1, 2])
    score.update(logits, targets)
    out = score.result(n_bytes=4)
    assert out["loss"] == pytest.approx(expected, rel=1e-6)
    assert out["perplexity"] == pytest.approx(math.exp(expected), rel=1e-6)
    assert out["accuracy"] == 0.5  # the first target is the argmax, the second is ranked last
    assert out["top2_accuracy"] == 0.5
    assert out["bits_per_byte"] == pytest.approx(2 * expected / (math.log(2) * 4))


def test_batch_stats_match_torch_cross_entropy_and_topk():
    torch.manual_seed(0)
    logits = torch.randn(2, 200, 50)  # more tokens than one chunk
    targets = torch.randint(0, 50, (2, 200))
    targets[0, 3] = IGNORE
    nll, n, hits, _ = batch_token_stats(logits, targets, [1, 5])
    ref = F.cross_entropy(logits.view(-1, 50), targets.view(-1), ignore_index=IGNORE, reduction="sum")
    assert n == 399
    assert nll == pytest.approx(float(ref), rel=1e-5)
    mask = targets != IGNORE
    top5 = logits.topk(5, dim=-1).indices
    assert hits[5] == int((top5 == targets.unsqueeze(-1)).any(-1)[mask].sum())
    assert hits[1] == int((logits.argmax(-1) == targets)[mask].sum())


@pytest.mark.parametrize("chunk", [1, 7, 128, 4096])
def test_batch_stats_are_the_same_in_chunks_of_any_size(chunk):
    """A GPU scores in large chunks and computes the chunks without a scored token too: any chunk size
    gives the default's figures, per row as well."""
    torch.manual_seed(1)
    logits = torch.randn(3, 150, 40)
    targets = torch.randint(0, 40, (3, 150))
    targets[1] = IGNORE  # a row with no scored token: whole chunks of nothing
    targets[2, :60] = IGNORE
    nll, n, hits, per_row = batch_token_stats(logits, targets, [1, 3])
    nll_c, n_c, hits_c, per_row_c = batch_token_stats(logits, targets, [1, 3], chunk=chunk)
    assert (n_c, hits_c) == (n, hits) and n == 150 + 90
    assert nll_c == pytest.approx(nll, rel=1e-12)
    torch.testing.assert_close(per_row_c, per_row, rtol=1e-12, atol=1e-12)
    assert per_row_c[1].tolist() == [0.0, 0.0, 0.0, 0.0]


def test_perplexity_overflow_is_inf_and_bpb():
    assert perplexity(1e6) == math.inf
    assert bits_per_byte(math.log(2) * 8, 8) == pytest.approx(1.0)


def test_tensor_bytes_count_tied_weights_once():
    emb = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    model = torch.nn.Sequential(emb, head, torch.nn.BatchNorm1d(4))
    model.half()
    by = tensor_bytes_by_dtype(model)
    # embedding 40 + batchnorm weight/bias 8 elements, fp16; buffers: running stats fp16 + num_batches int64
    assert by["params"] == {"float16": (40 + 8) * 2}
    assert by["buffers"] == {"float16": 8 * 2, "int64": 8}
    assert count_parameters(model) == 48


def test_redaction_hides_secrets_not_sizes():
    from modelxray.tracking.redact import redact

    out = redact(
        {
            "dataset.max_tokens": "8192",
            "tracker.hf_token": "hf_abc",
            "tracker.api_key": "k",
            "tracker.uri": "https://user:pw@mlflow.example/x",
            "model.name": "gpt2",
            "analyzer.performance.prefix_token": "bos",
        }
    )
    assert out == {
        "dataset.max_tokens": "8192",
        "tracker.hf_token": "***",
        "tracker.api_key": "***",
        "tracker.uri": "https://***@mlflow.example/x",
        "model.name": "gpt2",
        "analyzer.performance.prefix_token": "bos",  # a vocabulary token, not a credential
    }


def test_the_per_token_standard_error_is_the_one_of_independent_tokens():
    """llama.cpp's perplexity tool treats tokens as independent: std(token NLL) / sqrt(n), reported
    beside the window-based error for comparison (``loss_se_per_token``, ``perplexity_se_per_token``)."""
    import torch.nn.functional as F

    from modelxray.metrics.measurements import Quality

    g = torch.Generator().manual_seed(0)
    logits, targets = torch.randn(3, 9, 11, generator=g), torch.randint(0, 11, (3, 9), generator=g)
    targets[1, :4] = -100
    score = LMScore(ks=[1])
    score.update(logits[:2], targets[:2])
    score.update(logits[2:], targets[2:])
    nll = F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1), ignore_index=-100, reduction="none")
    nll = nll[targets.reshape(-1) != -100].double()
    out = score.result()
    assert out["loss_se_per_token"] == pytest.approx(float(nll.std(unbiased=True) / nll.numel() ** 0.5), rel=1e-9)
    metrics = Quality.from_dict(out).to_metrics()
    assert metrics["perplexity_se_per_token"] == pytest.approx(metrics["perplexity"] * out["loss_se_per_token"])


def test_divergence_in_chunks_is_the_whole_tensor_formula():
    """The KL pass goes a few positions at a time (memory: no N x vocab copies); its figures are the
    textbook KL(p || q) and top-token change at every position, gathered or indexed."""
    from modelxray.metrics.lm import KL_CHUNK, divergence_at, divergence_spans, token_divergence

    torch.manual_seed(0)
    logits_ref, logits = torch.randn(3, 2 * KL_CHUNK + 1, 40), torch.randn(3, 2 * KL_CHUNK + 1, 40)
    mask = torch.rand(3, 2 * KL_CHUNK + 1) > 0.3
    logp = torch.log_softmax(logits_ref, -1)
    kl, dp, rows = token_divergence(logp, logits, mask)
    p, logq = logp[mask].double(), torch.log_softmax(logits[mask].double(), -1)
    assert torch.allclose(kl, (p.exp() * (p - logq)).sum(-1), atol=1e-5)
    top = p.argmax(-1, keepdim=True)
    assert torch.allclose(dp, (logq.gather(-1, top).exp() - p.gather(-1, top).exp()).squeeze(-1), atol=1e-6)
    assert rows.tolist() == mask.nonzero()[:, 0].tolist()
    # the same positions named by index rather than gathered: the same numbers
    flat = logits.reshape(-1, 40)
    again = divergence_at(
        logp.reshape(-1, 40), flat, mask, mask.reshape(-1).nonzero().squeeze(1), mask.reshape(-1).nonzero().squeeze(1)
    )
    assert torch.equal(again[0], kl) and torch.equal(again[1], dp)
    assert divergence_spans(33, 16) == [(0, 16), (16, 33)] and divergence_spans(0) == [(0, 0)]
