"""Evaluation windows: each protocol scores the tokens it promises, with the context it promises."""

import torch

from modelxray.metrics.windows import IGNORE, batched, disjoint_windows, make_windows, sliding_windows


def _scored_positions(windows, ids, prefix=None):
    """Map each scored target back to its position in ids by checking the context is a true prefix."""
    full = ids.tolist() if prefix is None else [prefix] + ids.tolist()
    offset = 0 if prefix is None else 1
    positions = []
    for w in windows:
        inp, tgt = w.inputs.tolist(), w.targets.tolist()
        # locate the window in the full sequence
        starts = [s for s in range(len(full)) if full[s : s + len(inp)] == inp]
        assert starts, "window inputs are not a contiguous slice"
        s = starts[0]
        for j, t in enumerate(tgt):
            if t != IGNORE:
                assert full[s + j + 1] == t
                positions.append(s + j + 1 - offset)
    return positions


def test_disjoint_scores_all_but_first_token_of_each_window():
    ids = torch.arange(10, 30)  # 20 distinct tokens
    w = disjoint_windows(ids, 8)
    assert [x.inputs.numel() for x in w] == [8, 8, 4]
    pos = _scored_positions(w, ids)
    assert sorted(pos) == [p for p in range(20) if p % 8 != 0]


def test_lm_eval_rolling_scores_every_token_once_with_overlap_of_one():
    ids = torch.arange(100, 120)
    w = make_windows(ids, 8, "lm_eval_rolling", prefix=1)
    assert sorted(_scored_positions(w, ids, prefix=1)) == list(range(20))
    # reference: lm-evaluation-harness get_rolling_token_windows(context_len=1), written out by hand
    assert w[0].inputs.tolist() == [1] + list(range(100, 107))
    assert w[1].inputs.tolist() == list(range(107, 115))
    assert w[1].targets.tolist() == list(range(108, 116))
    assert w[2].inputs.tolist() == list(range(111, 119))  # last window: 4 new targets, full context
    assert [t for t in w[2].targets.tolist() if t != IGNORE] == list(range(116, 120))


def test_sliding_with_stride_gives_each_scored_token_full_context():
    ids = torch.arange(50, 90)
    w = sliding_windows(ids, 16, 4, prefix=None)
    pos = _scored_positions(w, ids)
    assert sorted(pos) == list(range(1, 40))
    for win in w[4:]:
        assert win.inputs.numel() == 16  # full context once enough tokens precede


def test_batched_groups_equal_lengths_in_order():
    ids = torch.arange(0, 20)
    batches = list(batched(disjoint_windows(ids, 8), 4))
    assert [b[0].shape for b in batches] == [torch.Size([2, 8]), torch.Size([1, 4])]
