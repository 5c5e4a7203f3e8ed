"""Half-precision models (``model.dtype=bfloat16`` / ``float16``) through the analyzers, with the
metrics computed in float32: a bf16 model's loss is the float32 loss of its own logits."""

import math

import pytest
import torch
import torch.nn.functional as F

from conftest import TINY_JOB, cli_results
from modelxray import api


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_half_precision_model_is_scored_in_float32(dtype, tmp_path):
    from modelxray.measure.scoring import score_windows
    from modelxray.metrics.windows import IGNORE, make_windows

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.Linear(16, 50)).to(getattr(torch, dtype))
    ids = torch.randint(0, 50, (257,))
    windows = make_windows(ids, 64, "disjoint")
    score, _ = score_windows(model, windows, 2, [1], progress=False)
    with torch.no_grad():
        logits = torch.cat([model(w.inputs) for w in windows]).float()  # the model's own half logits
    targets = torch.cat([w.targets for w in windows]).long()
    expected = F.cross_entropy(logits, targets, ignore_index=IGNORE).item()
    assert score.result()["loss"] == pytest.approx(expected, rel=1e-5)  # not rounded to half precision


def test_a_bf16_run_gives_the_float32_quality_within_rounding(tmp_path):
    runs = {}
    for dtype in ("float32", "bfloat16"):
        out = api.analyze([*TINY_JOB, "tracker=none", f"model.dtype={dtype}"], output_dir=tmp_path / dtype)
        runs[dtype] = out.metrics
    ppl32, ppl16 = runs["float32"]["performance/perplexity"], runs["bfloat16"]["performance/perplexity"]
    assert math.isfinite(ppl16) and abs(ppl16 / ppl32 - 1) < 0.02


@pytest.mark.slow  # every analyzer, a run.py process per dtype
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_every_analyzer_runs_a_half_precision_model(dtype, tmp_path):
    results = cli_results(
        [
            *TINY_JOB,
            f"model.dtype={dtype}",
            "analyzer=[performance,robustness,quant_impact,bitwidth,inspect]",
            "quant=int4",
            "analyzer.bitwidth.sensitivity=false",
            "analyzer.robustness.pgd_eps=[]",
        ],
        tmp_path,
        timeout=600,
    )
    for name in ("performance", "robustness", "quant_impact", "bitwidth", "inspect", "quant"):
        assert not results[name].get("error"), results[name].get("error")
        finite = [v for v in results[name]["metrics"].values() if isinstance(v, float)]
        assert finite and all(math.isfinite(v) for v in finite), name
