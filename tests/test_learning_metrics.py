"""Learning-dynamics metrics against hand computations and independent formulas."""

import math

import numpy as np
import pytest
import torch

from modelxray.learning_dynamics.cartography import RegionThresholds, cartography, hard_example_order
from modelxray.learning_dynamics.cka import linear_cka
from modelxray.learning_dynamics.forgetting import forgetting_histogram, forgetting_stats
from modelxray.learning_dynamics.fourier import fourier_sparsity, frequency_energy, top_frequencies
from modelxray.learning_dynamics.memorization import gap_events, region_overlap
from modelxray.learning_dynamics.recorder import ExampleRecorder
from modelxray.learning_dynamics.state import load_state, save_state
from modelxray.learning_dynamics.transitions import change_points, detect_transitions, transition_step

N = np.nan
CORRECT = np.array(
    [
        [0, 1, 1, 0, 1],  # learned at 1, forgotten at 3: 1 event
        [1, 1, 1, 1, 1],  # unforgettable from the start
        [0, 0, 0, 0, 0],  # never learned
        [1, 0, 1, 0, 0],  # forgotten at 1 and 3: 2 events
        [N, 1, N, 0, 1],  # unseen epochs keep the last state: forgotten at 3
    ],
    dtype=float,
)


def test_forgetting_events_equal_hand_counts():
    f = forgetting_stats(CORRECT)
    assert f.events.tolist() == [1, 0, 0, 2, 1]
    assert f.total_events == 4
    assert f.first_learned.tolist() == [1, 0, -1, 0, 1]
    assert f.unforgettable.tolist() == [False, True, False, False, False]
    assert f.never_learned.tolist() == [False, False, True, False, False]
    hist = forgetting_histogram(f.events, f.never_learned)
    assert hist == [
        {"forgetting_events": 0, "examples": 1},
        {"forgetting_events": 1, "examples": 2},
        {"forgetting_events": 2, "examples": 1},
        {"forgetting_events": "never learned", "examples": 1},
    ]


def test_cartography_equals_hand_computation():
    p = np.array([[0.9, 0.8, 1.0, N], [0.1, 0.2, 0.3, N], [0.1, 0.9, 0.1, 0.9]])
    c = np.array([[1, 1, 1, N], [0, 0, 0, N], [0, 1, 0, 1]], dtype=float)
    carto = cartography(p, c)
    assert carto.confidence == pytest.approx([0.9, 0.2, 0.5])
    # population std (ddof=0): sqrt(((0)^2 + 0.1^2 + 0.1^2) / 3)
    assert carto.variability == pytest.approx([math.sqrt(0.02 / 3), math.sqrt(0.02 / 3), 0.4])
    assert carto.correctness == pytest.approx([1.0, 0.0, 0.5])
    assert carto.region.tolist() == ["easy", "hard", "ambiguous"]
    assert carto.shares() == pytest.approx({"easy": 1 / 3, "ambiguous": 1 / 3, "hard": 1 / 3})
    # thresholds are config: a high ambiguity bar makes the third one easy (confidence 0.5 >= 0.5)
    assert cartography(p, c, RegionThresholds(0.45, 0.5, None)).region.tolist() == ["easy", "hard", "easy"]
    order = hard_example_order(carto.confidence, carto.variability, np.array([0, 0, 3]))
    assert order.tolist() == [1, 2, 0]


def _logits_for(correct_row: np.ndarray, p_true: np.ndarray, labels: np.ndarray, n_classes: int = 3) -> torch.Tensor:
    """Logits whose softmax gives the label probability p_true and whose argmax is right iff correct."""
    n = len(labels)
    logits = torch.zeros(n, n_classes, dtype=torch.float64)
    for i in range(n):
        other = (labels[i] + 1) % n_classes
        rest = 1 - p_true[i]
        probs = np.full(n_classes, 1e-6)
        probs[labels[i]] = p_true[i]
        probs[other] = rest - 1e-6 * (n_classes - 2)
        assert (probs.argmax() == labels[i]) == bool(correct_row[i])
        logits[i] = torch.log(torch.tensor(probs))
    return logits


def test_recorder_from_logits_matches_pure_functions_and_hand_values():
    labels = np.array([0, 1, 2, 0, 1])
    p_hist = np.array(
        [
            [0.2, 0.7, 0.9, 0.3, 0.8],
            [0.9, 0.95, 0.9, 0.99, 0.9],
            [0.1, 0.2, 0.1, 0.2, 0.3],
            [0.6, 0.3, 0.8, 0.4, 0.2],
            [0.5, 0.9, 0.5, 0.4, 0.7],
        ]
    )
    seen = ~np.isnan(CORRECT)
    rec = ExampleRecorder(n_train=8, track_examples=5, labels=np.r_[labels, [0, 0, 0]])
    for e in range(5):
        idx = np.flatnonzero(seen[:, e])
        batch_idx = np.r_[idx, [6, 7]]  # untracked positions are ignored
        corr = np.r_[CORRECT[idx, e], [1, 1]]
        pt = np.r_[
            np.where(CORRECT[idx, e] == 1, np.maximum(p_hist[idx, e], 0.6), np.minimum(p_hist[idx, e], 0.45)),
            [0.9, 0.9],
        ]
        lg = _logits_for(corr, pt, np.r_[labels[idx], [0, 0]])
        order = np.random.default_rng(e).permutation(len(batch_idx))  # batch order does not matter
        rec.update(lg[order], torch.from_numpy(batch_idx[order]), torch.from_numpy(np.r_[labels[idx], [0, 0]][order]))
        assert rec.commit(epoch=e + 1, step=10 * (e + 1))
    h = rec.history()
    np.testing.assert_array_equal(h["correct"], CORRECT)
    f_run, f_pure = rec.forgetting(), forgetting_stats(h["correct"])
    for key in ("events", "first_learned", "unforgettable", "never_learned"):
        np.testing.assert_array_equal(getattr(f_run, key), getattr(f_pure, key))
    assert f_run.events.tolist() == [1, 0, 0, 2, 1]
    from modelxray.learning_dynamics.cartography import cartography_from_sums

    c_sum = cartography_from_sums(rec.count, rec.sum_p, rec.sum_p2, rec.sum_correct)
    c_hist = cartography(h["p_true"], h["correct"])
    np.testing.assert_allclose(c_sum.confidence, c_hist.confidence, rtol=1e-12)
    np.testing.assert_allclose(c_sum.variability, c_hist.variability, atol=1e-7)
    np.testing.assert_allclose(c_hist.correctness, np.nanmean(CORRECT, axis=1))
    assert rec.epochs == [1, 2, 3, 4, 5] and rec.steps == [10, 20, 30, 40, 50]


def test_recorder_every_example_seen_random_selection():
    rec = ExampleRecorder(n_train=100, track_examples=10, selection="random", seed=3)
    assert len(rec.tracked) == 10 and np.all(np.diff(rec.tracked) > 0)
    logits = torch.randn(100, 4)
    y = logits.argmax(1)
    rec.update(logits, torch.arange(100), y)
    assert rec.commit(1, 1)
    assert np.all(rec.history()["correct"] == 1)
    assert not rec.commit(2, 2)  # nothing seen since


def test_recorder_blocks_reads_and_resume_match_the_pure_functions(monkeypatch):
    """Epochs are buffered in blocks and folded later: over several blocks, with examples unseen in
    some epochs, results read mid-epoch and a save/load mid-block, the running statistics equal
    the pure functions on the history and a recorder without history."""
    import modelxray.learning_dynamics.recorder as recorder_module

    monkeypatch.setattr(recorder_module, "BLOCK_EPOCHS", 4)
    rng = np.random.default_rng(0)
    n, k, classes, epochs = 30, 20, 3, 23
    labels = rng.integers(0, classes, n)
    rec = ExampleRecorder(n, k, "random", seed=1, labels=labels)
    lean = ExampleRecorder(n, k, "random", seed=1, labels=labels, keep_history=False)
    for e in range(epochs):
        seen = rng.random(n) < (1.0 if e % 5 == 0 else 0.7)  # some epochs see every example
        idx = np.flatnonzero(seen)
        logits = torch.from_numpy(rng.standard_normal((len(idx), classes)) * 2)
        y = torch.from_numpy(labels[idx])
        for r in (rec, lean):
            half = len(idx) // 2  # two batches per epoch, a read between them
            r.update(logits[:half], torch.from_numpy(idx[:half]), y[:half])
            if e % 3 == 1:
                r.forgetting(), r.last_epoch_mean_loss()  # a read mid-epoch folds the finished epochs only
            r.update(logits[half:], torch.from_numpy(idx[half:]), y[half:])
            assert r.commit(e, 10 * e)
        if e == 13:  # resume mid-block from the saved state
            rec = ExampleRecorder.from_state_dict(rec.state_dict())
    h = rec.history()
    assert h["correct"].shape == (k, epochs) and np.isnan(h["correct"]).any()
    pure = forgetting_stats(h["correct"])
    for r in (rec, lean):
        f = r.forgetting()
        for key in ("events", "first_learned", "unforgettable", "never_learned"):
            np.testing.assert_array_equal(getattr(f, key), getattr(pure, key))
        np.testing.assert_array_equal(r.count, (~np.isnan(h["correct"])).sum(axis=1))
        np.testing.assert_allclose(r.sum_p, np.nansum(h["p_true"], axis=1), rtol=1e-12)
        np.testing.assert_allclose(r.sum_correct, np.nansum(h["correct"], axis=1))
        last = h["loss"][:, -1]
        assert r.last_epoch_mean_loss() == pytest.approx(np.nanmean(last))
    full = ExampleRecorder(n, k, "random", seed=1, labels=labels)  # the history equals per-example cross-entropy
    idx = torch.arange(n)
    logits = torch.randn(n, classes)
    full.update(logits, idx, torch.from_numpy(labels))
    full.commit(0, 0)
    ce = torch.nn.functional.cross_entropy(logits, torch.from_numpy(labels), reduction="none").numpy()
    np.testing.assert_allclose(full.history()["loss"][:, 0], ce[full.tracked], rtol=1e-6)


def test_recorder_reuses_the_forward_losses_it_is_given():
    rec = ExampleRecorder(4, None, labels=np.array([0, 1, 0, 1]))
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [0.0, 3.0], [1.0, 1.0]])
    given = torch.tensor([0.5, 0.25, 0.125, 1.0])
    rec.update(logits, torch.arange(4), torch.tensor([0, 1, 0, 1]), loss=given)
    rec.commit(0, 0)
    h = rec.history()
    np.testing.assert_allclose(h["loss"][:, 0], given.numpy())
    assert h["correct"][:, 0].tolist() == [1, 1, 0, 0]  # a tie goes to the first class (argmax)
    # a fitted batch (every true-class probability > 0.5) skips the argmax: the same answer
    fitted = torch.tensor([[5.0, 0.0], [0.0, 5.0], [4.0, 0.0], [0.0, 3.0]])
    y = torch.tensor([0, 1, 0, 1])
    rec.update(fitted, torch.arange(4), y, loss=torch.nn.functional.cross_entropy(fitted, y, reduction="none"))
    rec.commit(1, 1)
    assert rec.history()["correct"][:, 1].tolist() == [1, 1, 1, 1]
    # a two-way tie (probability 0.5, even if rounding says 0.50000006) is not "sure": argmax decides
    tie = torch.tensor([[5.0, 0.0], [0.0, 5.0], [4.0, 0.0], [7.0, 7.0]])
    rec.update(tie, torch.arange(4), y, loss=torch.nn.functional.cross_entropy(tie, y, reduction="none"))
    rec.commit(2, 2)
    assert rec.history()["correct"][:, 2].tolist() == [1, 1, 1, 0]


def _hsic_cka(x, y):
    """Kornblith et al. eq. 3 through centered Gram matrices, written independently."""
    n = len(x)
    h = np.eye(n) - np.ones((n, n)) / n
    k, l = h @ (x @ x.T) @ h, h @ (y @ y.T) @ h
    hsic = lambda a, b: np.trace(a @ b) / (n - 1) ** 2  # noqa: E731
    return hsic(k, l) / math.sqrt(hsic(k, k) * hsic(l, l))


def test_linear_cka_properties():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((60, 10))
    y = x @ rng.standard_normal((10, 7)) + 0.5 * rng.standard_normal((60, 7))
    assert linear_cka(x, x) == pytest.approx(1.0, abs=1e-12)
    q, _ = np.linalg.qr(rng.standard_normal((10, 10)))
    base = linear_cka(x, y)
    assert linear_cka(x @ q, y) == pytest.approx(base, abs=1e-12)  # orthogonal transform
    assert linear_cka(3.7 * x, 0.2 * y) == pytest.approx(base, abs=1e-12)  # isotropic scaling
    assert linear_cka(x + 5.0, y) == pytest.approx(base, abs=1e-12)  # centering
    assert base == pytest.approx(_hsic_cka(x, y), abs=1e-12)
    wide = rng.standard_normal((20, 300))  # Gram-space path (features > examples)
    wide2 = wide @ np.diag(rng.uniform(0.5, 2, 300)) + 0.1 * rng.standard_normal((20, 300))
    assert linear_cka(wide, wide2) == pytest.approx(_hsic_cka(wide, wide2), abs=1e-12)
    assert linear_cka(torch.from_numpy(wide).float().numpy(), wide2) == pytest.approx(_hsic_cka(wide, wide2), abs=1e-6)
    assert linear_cka(x, x * np.r_[10.0, np.ones(9)]) < 0.99  # not invariant to anisotropic scaling


def test_fourier_sparsity_of_pure_frequencies():
    p, d = 23, 16
    a = np.arange(p)[:, None]
    phases = np.random.default_rng(0).uniform(0, 2 * np.pi, d)
    pure = np.cos(2 * np.pi * 5 * a / p + phases)
    assert fourier_sparsity(pure, top_k=1) == pytest.approx(1.0, abs=1e-12)
    assert top_frequencies(pure, 1) == [5]
    two = pure + 0.5 * np.sin(2 * np.pi * 9 * a / p)
    assert fourier_sparsity(two, top_k=2) == pytest.approx(1.0, abs=1e-12)
    assert fourier_sparsity(two, top_k=1) < 0.95
    energy = frequency_energy(torch.randn(p, d, generator=torch.Generator().manual_seed(0)))
    assert len(energy) == p // 2 + 1
    assert fourier_sparsity(np.random.default_rng(1).standard_normal((p, 256)), top_k=3) < 0.4  # random: ~3/12


def test_change_point_finds_a_planted_step():
    rng = np.random.default_rng(0)
    steps = np.arange(400) * 10
    values = np.r_[np.full(250, 0.1), np.full(150, 0.9)] + 0.05 * rng.standard_normal(400)
    for method in ("binseg", "pelt"):
        cps = change_points(values, steps, metric="acc", method=method)
        assert len(cps) == 1, cps
        assert abs(cps[0].index - 250) <= 2 and abs(cps[0].step - 2500) <= 20
        assert cps[0].jump == pytest.approx(0.8, abs=0.03)
    assert change_points(0.05 * rng.standard_normal(400), steps) == []  # pure noise: none
    sigmoid = 1 / (1 + np.exp(-(np.arange(3000) - 2000) / 60))
    (cp,) = change_points(sigmoid)  # a smooth rise: one change near its middle
    assert abs(cp.step - 2000) < 60


def test_transition_step_crosses_and_stays():
    v = [0.1, 0.5, 0.96, 0.9, 0.97, 0.99, 1.0]
    assert transition_step(v, [0, 10, 20, 30, 40, 50, 60], level=0.95) == 40
    assert transition_step([0.1, 0.2], level=0.95) is None
    assert transition_step([2.0, 0.5, 0.1], level=0.2, above=False) == 2
    out = detect_transitions({"test_accuracy": (list(range(0, 400, 1)), np.r_[np.zeros(300), np.ones(100)])})
    assert out["metrics"]["transitions/test_accuracy/step"] == 300
    assert out["change_points"][0]["step"] == 300


def test_gap_events_and_region_overlap():
    ev = gap_events([0, 10, 20, 30, 40, 50], [0.0, 0.3, 0.5, 0.2, 0.04, 0.01], open_level=0.1, close_level=0.05)
    assert (ev.open_step, ev.close_step, ev.max_gap, ev.max_gap_step) == (10, 40, 0.5, 20)
    assert gap_events([0, 1], [0.3, 0.3]).close_step is None
    ov = region_overlap(
        flipped=[2, 5, 9],
        tracked=np.arange(8),
        region=np.array(["easy", "hard", "hard", "easy", "easy", "hard", "easy", "easy"]),
    )
    assert ov["recall"] == 1.0 and ov["precision"] == pytest.approx(2 / 3) and ov["n_flipped_tracked"] == 2


def test_state_round_trips_exactly(tmp_path):
    rng = np.random.default_rng(0)
    state = {
        "f": 0.1 + 0.2,
        "nan": float("nan"),
        "inf": -float("inf"),
        "i": 7,
        "b": True,
        "none": None,
        "s": "x",
        "tuple": (1, 2.5, "z"),
        "list": [1, [2, {"k": np.float32(1.5)}]],
        "f64": rng.standard_normal((3, 4)),
        "i8": np.array([-1, 0, 1], np.int8),
        "u": np.array(["easy", "hard"]),
        "empty": np.zeros((5, 0), np.float32),
        "t": torch.randn(2, 3, dtype=torch.float16),
        "tl": torch.arange(5),
        "__weird__": {"__tuple__": 1},
        "npint": np.int64(3),
    }
    save_state(tmp_path / "s", state)
    back = load_state(tmp_path / "s")
    assert set(back) == set(state)
    assert back["f"] == state["f"] and math.isnan(back["nan"]) and back["inf"] == -math.inf
    assert back["tuple"] == (1, 2.5, "z") and isinstance(back["tuple"], tuple)
    assert back["list"][1][1]["k"] == np.float32(1.5) and type(back["list"][1][1]["k"]) is np.float32
    for key in ("f64", "i8", "u", "empty"):
        assert back[key].dtype == state[key].dtype and back[key].shape == state[key].shape
        assert back[key].tobytes() == state[key].tobytes()
    for key in ("t", "tl"):
        assert back[key].dtype == state[key].dtype and torch.equal(back[key], state[key])
    assert back["__weird__"] == {"__tuple__": 1} and back["npint"] == 3 and type(back["npint"]) is np.int64
    assert "pickle" not in (tmp_path / "s.json").read_text()
    with pytest.raises(TypeError):
        save_state(tmp_path / "bad", {1: 2})


def test_cartography_regions_by_share_of_variability():
    from modelxray.learning_dynamics.cartography import RegionThresholds, assign_regions

    var = np.array([0.30, 0.25, 0.22, 0.21, 0.05, 0.01])
    conf = np.array([0.5, 0.5, 0.9, 0.1, 0.9, 0.1])
    absolute = assign_regions(conf, var, RegionThresholds(0.2, 0.5, None))
    assert list(absolute) == ["ambiguous"] * 4 + ["easy", "hard"]
    top_third = assign_regions(conf, var, RegionThresholds(0.2, 0.5, ambiguous_top_share=1 / 3))
    assert list(top_third) == ["ambiguous", "ambiguous", "easy", "hard", "easy", "hard"]
    assert list(assign_regions(conf, var)) == list(top_third)  # the default: the most variable third (0.33)
    assert list(assign_regions(conf, var, RegionThresholds(0.2, 0.5, ambiguous_top_share=0.0))) == [
        "easy",
        "easy",
        "easy",
        "hard",
        "easy",
        "hard",
    ]


def test_centered_cka_with_known_self_similarities_is_linear_cka_exactly():
    """The feature-evolution callback reuses a snapshot's centered activations and self-similarity
    (the next snapshot's cka_prev, the report's CKA to the final one): the same numbers, bit for bit."""
    from modelxray.learning_dynamics.cka import centered, centered_cka, gram_space, self_similarity

    rng = np.random.default_rng(1)
    for n, p in ((200, 30), (20, 300)):  # feature space, Gram space
        x, y = rng.standard_normal((n, p)), rng.standard_normal((n, p)) + 0.3
        gram = gram_space(n, p, p)
        assert gram == (p > n)
        xc, yc = centered(x), centered(y)
        known = centered_cka(xc, yc, self_similarity(xc, gram), self_similarity(yc, gram))
        assert known == centered_cka(xc, yc) == linear_cka(x, y)
    with pytest.raises(ValueError, match="same examples"):
        linear_cka(np.ones((3, 2)), np.ones((4, 2)))


def test_beside_runs_both_and_gives_the_sequential_results():
    from modelxray.learning_dynamics import features

    rng = np.random.default_rng(0)
    a = rng.standard_normal((300, 64))
    labels = rng.integers(0, 5, 300)
    side, main = features.beside(
        lambda: features.silhouette_by_class(a, labels), lambda: features.linear_probe_accuracy(a, labels)
    )
    with features.single_thread():
        assert side == features.silhouette_by_class(a, labels)
        assert main == features.linear_probe_accuracy(a, labels)

    def fails():
        raise RuntimeError("side failed")

    with pytest.raises(RuntimeError, match="side failed"):
        features.beside(fails, lambda: 1)


def test_loss_and_prediction_are_the_cross_entropy_and_the_argmax():
    from modelxray.learning_dynamics.evaluation import loss_and_prediction, per_example_stats

    logits = torch.tensor([[1.0, 3.0, 3.0], [0.5, -1.0, 0.0], [2.0, 2.0, 1.0]])
    labels = torch.tensor([2, 0, 0])
    loss, pred = loss_and_prediction(logits, labels)
    assert torch.equal(pred, logits.argmax(-1)) and pred.tolist() == [1, 0, 0]  # the first maximum
    assert torch.equal(loss, torch.nn.functional.cross_entropy(logits, labels, reduction="none"))
    stats = per_example_stats(logits.half(), labels)
    assert stats[1].tolist() == [False, True, True] and stats[0].dtype == torch.float32
