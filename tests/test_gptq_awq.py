"""GPTQ and AWQ: exact reductions, better reconstructions than RTN, and a better tiny model at 3 bits."""

from pathlib import Path

import pytest
import torch

from modelxray.analyzers.performance import PerformanceAnalyzer
from modelxray.core.result import RunContext
from modelxray.core.subject import Subject
from modelxray.data.base import TokenData
from modelxray.quant.awq import AWQQuantizer
from modelxray.quant.awq_impl import search_clip, search_scale
from modelxray.quant.gptq import GPTQQuantizer
from modelxray.quant.gptq_impl import gptq_quantize
from modelxray.quant.rtn import QuantSpec, fake_quantize
from modelxray.quant.weight import WeightQuantizer

SPEC3 = QuantSpec(bits=3, symmetric=True, granularity="group", group_size=32)


def _correlated_inputs(n=2048, d=96, seed=0):
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(d, d, generator=g) / d**0.5
    scales = torch.logspace(-1, 1, d)  # some channels much larger than others (as in LLMs)
    return (torch.randn(n, d, generator=g) @ mix) * scales


def test_gptq_with_identity_hessian_is_rtn():
    w = torch.randn(40, 96, generator=torch.Generator().manual_seed(1))
    q = gptq_quantize(w, torch.eye(96), SPEC3, act_order=False, damp=0.0)
    assert torch.allclose(q, fake_quantize(w, SPEC3), atol=1e-6)


@pytest.mark.parametrize("act_order,bound", [(False, 0.95), (True, 0.6)])
def test_gptq_reconstructs_outputs_better_than_rtn(act_order, bound):
    x = _correlated_inputs()
    w = torch.randn(64, 96, generator=torch.Generator().manual_seed(2))
    h = 2 * x.t() @ x / x.shape[0]
    q = gptq_quantize(w, h, SPEC3, act_order=act_order)
    err_gptq = ((x @ (q - w).t()) ** 2).sum()
    err_rtn = ((x @ (fake_quantize(w, SPEC3) - w).t()) ** 2).sum()
    assert err_gptq < bound * err_rtn  # act_order handles the few large input channels first
    # same packed format: each group of each row takes at most 7 values (symmetric 3-bit levels)
    for a in range(0, 96, 32):
        assert max(len(torch.unique(row)) for row in q[:, a : a + 32]) <= 7


def test_awq_scale_and_clip_never_worse_than_rtn_on_their_sample():
    x = _correlated_inputs(seed=3)
    w = torch.randn(64, 96, generator=torch.Generator().manual_seed(4))
    s, ratio = search_scale(x, x.abs().mean(0), [w], [SPEC3], grid=20, duo=True)
    err = lambda q: float(((x @ (q - w).t()) ** 2).sum())
    rtn = err(fake_quantize(w, SPEC3))
    scaled = err(fake_quantize(w * s, SPEC3) / s)
    assert scaled <= rtn and ratio > 0  # large input channels make a non-trivial scale pay off
    clip = search_clip(x / s, w * s, SPEC3, grid=20, clip_min=0.5)
    assert err(fake_quantize(w * s, SPEC3, clip) / s) <= scaled + 1e-6
    assert clip.min() < 1.0


def _subject(trained_tiny):
    loaded, data = trained_tiny
    return Subject(loaded.model, loaded.tokenizer, data, loaded.info)


def _calibration_loss(subject, calibration):
    data = TokenData("cal", calibration.reshape(-1), 1, calibration.shape[1], calibration.numel())
    s = Subject(subject.model, subject.tokenizer, data, subject.info)
    a = PerformanceAnalyzer(speed_batch_sizes=[1], iters=1, warmup=0, layer_timing=False, top_k=[1])
    return a.run(s, RunContext(output_dir=Path("."), progress=False)).metrics["loss"]


def test_gptq_and_awq_recover_most_of_rtns_damage_at_2_bits_per_channel(trained_tiny):
    """At 2 bits per output channel RTN raises the tiny model's calibration loss clearly; GPTQ and
    AWQ each win back more than half of that damage (measured here: 95% and 77%). A setting with
    small margins (3 bits per tensor: RTN +0.01) flipped the AWQ/RTN order between CPUs."""
    loaded, data = trained_tiny
    cal = data.calibration[:32]
    small = TokenData(data.name, data.ids, data.n_bytes, data.seq_len, data.available_tokens, cal)
    subject = Subject(loaded.model, loaded.tokenizer, small, loaded.info)  # the shared fixture stays as it is
    fmt = dict(bits=2, granularity="channel", targets=["linear"])
    base = _calibration_loss(subject, cal)
    rtn = _calibration_loss(WeightQuantizer(**fmt).apply(subject)[0], cal)
    gptq_subject, report = GPTQQuantizer(**fmt, batch_size=16).apply(subject)
    gptq = _calibration_loss(gptq_subject, cal)
    awq = _calibration_loss(AWQQuantizer(**fmt, batch_size=16, grid=10, clip_grid=10).apply(subject)[0], cal)
    damage = rtn - base
    assert damage > 0.03, (base, rtn)
    assert rtn - gptq > 0.5 * damage, (base, rtn, gptq)
    assert rtn - awq > 0.5 * damage, (base, rtn, awq)
    assert report.metrics["modules_quantized"] == 8


def test_modules_outside_the_blocks_fall_back_to_rtn(trained_tiny):
    subject = _subject(trained_tiny)
    subject = Subject(subject.model, subject.tokenizer, subject.data, subject.info)
    _, report = GPTQQuantizer(bits=4, targets=["linear", "embedding"], batch_size=16).apply(subject)
    assert report.metrics["modules_quantized"] == 8 + 2  # 8 decoder linears by GPTQ, wte and wpe by RTN
    assert sum("RTN: outside the blocks" in r["format"] for r in report.tables["layers"]) == 2


def test_calibration_needs_tokens_after_the_evaluated_span(trained_tiny):
    from modelxray.core.errors import ConfigError

    loaded, data = trained_tiny
    empty = TokenData(data.name, data.ids, data.n_bytes, data.seq_len, data.available_tokens, None)
    with pytest.raises(ConfigError, match="^dataset.calibration_windows: no calibration windows"):
        GPTQQuantizer(bits=4).apply(Subject(loaded.model, loaded.tokenizer, empty, loaded.info))


def test_calibrated_quantizers_leave_the_shared_model_untouched(trained_tiny):
    import copy

    subject = _subject(trained_tiny)
    before = copy.deepcopy(subject.model.state_dict())
    GPTQQuantizer(bits=3, batch_size=16).apply(subject)
    AWQQuantizer(bits=3, batch_size=16, grid=4, clip_grid=4).apply(subject)
    assert all(torch.equal(v, subject.model.state_dict()[k]) for k, v in before.items())


def test_progress_false_hides_the_quantizers_bar(trained_tiny, capsys):
    subject = _subject(trained_tiny)
    q = GPTQQuantizer(bits=4, group_size=32)
    q.apply(subject, progress=False)
    assert "gptq" not in capsys.readouterr().err
    q.apply(subject, progress=True)
    assert "gptq" in capsys.readouterr().err


@pytest.mark.parametrize(
    "quantizer", [GPTQQuantizer(bits=4, batch_size=16), AWQQuantizer(bits=4, batch_size=16, grid=2)]
)
def test_a_bf16_models_bytes_before_are_its_stored_bytes(trained_tiny, quantizer):
    """AWQ searches on a float32 copy of each weight: the report counts the bf16 weight as stored
    (it once counted the copy, 4 bytes each, and gave a bf16 model a negative size after)."""
    import copy

    subject = _subject(trained_tiny)
    model = copy.deepcopy(subject.model).to(torch.bfloat16)
    _, report = quantizer.apply(Subject(model, subject.tokenizer, subject.data, subject.info))
    rows = report.tables["layers"]
    assert all(r["bytes_before"] == 2 * r["elements"] for r in rows)
    m = report.metrics
    assert 0 < m["model_bytes_after"] < m["model_bytes_before"]
    assert m["model_bytes_before"] == 2 * sum(p.numel() for p in {p.data_ptr(): p for p in model.parameters()}.values())
