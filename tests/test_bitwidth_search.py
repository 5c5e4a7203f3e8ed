"""The recommendation's binary search evaluated several levels at a time (a streamed model: fewer
reads) finds the k a plain binary search finds, whatever the predicate."""

from __future__ import annotations

import random

import pytest

from modelxray.analyzers.bitwidth.run import smallest_within


def _plain(n, within):
    lo, hi = 0, n
    if not within(hi):
        lo = hi
    while lo < hi:
        mid = (lo + hi) // 2
        if within(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


@pytest.mark.parametrize("levels", [1, 2, 3])
def test_the_same_k_as_a_plain_binary_search_for_any_predicate(levels):
    rng = random.Random(levels)
    for _ in range(300):
        n = rng.randint(0, 70)
        truth = [rng.random() < 0.5 for _ in range(n + 1)]  # not even monotone
        if rng.random() < 0.5:  # and monotone ones, as a budget usually is
            cut = rng.randint(0, n + 1)
            truth = [k >= cut for k in range(n + 1)]
        calls = []

        def within_many(ks):
            calls.append(list(ks))
            return [truth[k] for k in ks]

        k, evaluated = smallest_within(n, within_many, levels)
        assert k == _plain(n, lambda j: truth[j])
        assert len(evaluated) == sum(len(c) for c in calls)  # no k evaluated twice
        assert all(len(c) <= 2**levels for c in calls)


def test_two_levels_per_call_halve_the_calls_of_a_64_unit_search():
    counts = {}
    for levels in (1, 2):
        calls = []
        smallest_within(64, lambda ks: calls.append(ks) or [k >= 37 for k in ks], levels)
        counts[levels] = len(calls)
    assert counts == {1: 7, 2: 4}


def test_each_mode_names_how_its_sensitivity_is_ranked_and_older_results_are_read_the_same():
    """insights.md ranks sensitivity units by the view the mode names (no branch on a kind's name);
    a result saved before modes named it is read to the same view."""
    from modelxray.analyzers.bitwidth.insights import _view_of_older_result
    from modelxray.analyzers.bitwidth.modes import ClassifierMode, LanguageModelMode, TaskMode, VisionMode

    views = {m: m.sensitivity_view for m in (LanguageModelMode, TaskMode, ClassifierMode, VisionMode)}
    assert len(set(views.values())) == 4
    for mode, sens in (
        (LanguageModelMode, [{"loss_increase": 0.1}]),
        (TaskMode, [{"loss_increase": 0.1}]),
        (ClassifierMode, [{"kl": 0.1}]),
        (VisionMode, [{"disagreement": 0.1}]),
    ):
        assert _view_of_older_result({"unit_noun": mode.unit_noun}, mode.key, sens) == views[mode]
