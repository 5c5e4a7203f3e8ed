"""The speed benchmark stops once its estimate is precise enough: a steady model after the minimum,
a noisy one when its interval narrows or its time budget is spent, never past the maximum."""

import math

import pytest
import torch

from modelxray.measure.speed import StopRule, time_forward
from modelxray.metrics.measurements.speed import Latency


def test_a_steady_timing_stops_at_the_minimum():
    rule = StopRule(max_iters=20, min_iters=3, precision=0.05, budget_s=60)
    assert not rule.done([1.0, 1.0])
    assert rule.done([1.0, 1.001, 0.999])


def test_the_rule_is_the_latency_interval():
    """It stops exactly when the reported 95% interval of the mean is within the precision."""
    rule = StopRule(max_iters=50, min_iters=3, precision=0.05, budget_s=math.inf)
    times = [1.0, 1.2, 0.9, 1.1, 0.95, 1.05, 1.0, 1.02, 0.98, 1.01]
    for n in range(3, len(times) + 1):
        lat = Latency.from_values(times[:n])
        low, high = lat.ci95_ms
        assert rule.done(times[:n]) == ((high - low) / 2 <= 0.05 * lat.mean_ms + 1e-9), n


def test_a_noisy_timing_stops_at_its_budget_or_maximum():
    noisy = [0.1, 1.0] * 10
    assert StopRule(max_iters=30, min_iters=3, precision=0.01, budget_s=3.0).done(noisy[:4]) is False
    assert StopRule(max_iters=30, min_iters=3, precision=0.01, budget_s=3.0).done(noisy[:5]) is False
    assert StopRule(max_iters=30, min_iters=3, precision=0.01, budget_s=3.0).done(noisy[:6]) is True  # 3.3 s
    assert StopRule(max_iters=4, min_iters=3, precision=0.01, budget_s=99).done(noisy[:4]) is True


def test_a_count_times_exactly_that_many():
    model = torch.nn.Linear(4, 4)
    assert len(time_forward(model, torch.zeros(2, 4), warmup=0, stop=7, progress=False)) == 7


@pytest.mark.parametrize("iters", [1, 2])
def test_fewer_iters_than_the_minimum_is_the_count(iters):
    class Cfg:
        min_iters, precision, timing_budget_s = 3, 0.05, 3.0

    cfg = Cfg()
    cfg.iters = iters
    model = torch.nn.Linear(4, 4)
    assert len(time_forward(model, torch.zeros(2, 4), 0, StopRule.of(cfg), progress=False)) == iters
