"""The learning trackers of a user's loop (``modelxray.learning_dynamics.trackers``): their
numbers equal the callbacks' and hand computations, bad input fails before work in one line, and
the learning-dynamics examples run."""

import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from modelxray.core.errors import ConfigError
from modelxray.learning_dynamics import (
    ExampleDynamicsCallback,
    FeatureEvolutionTracker,
    GradientFlowAnalyzer,
    LearningDynamicsAnalyzer,
    MemorizationDetector,
    PhaseTransitionAttributor,
)
from modelxray.learning_dynamics.attribution import TracInCheckpoint, tracin
from modelxray.learning_dynamics.evaluation import EvalResult, evaluate
from modelxray.training.callbacks import TrainState

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(
    p for p in (REPO / "examples").glob("learning_dynamics_*.py") if p.stem != "learning_dynamics_your_checkpoints"
)
N, D, C, BS = 96, 8, 4, 16


def _data(seed: int = 0, n: int = N):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, D, generator=g)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()  # 4 learnable classes
    flip = torch.arange(0, n, 7)
    y[flip] = (y[flip] + 1) % C  # some noise, so that examples get forgotten
    return x, y


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(D, 16), nn.ReLU(), nn.Linear(16, C))


class Counting(nn.Module):
    """Counts forwards: bad input must fail before any."""

    def __init__(self):
        super().__init__()
        self.net, self.calls = _model(), 0

    def forward(self, x):
        self.calls += 1
        return self.net(x)


def _train(epochs: int, on_batch, on_epoch=None, shuffle_seed: int | None = 1):
    """SGD over mini-batches of (x, y) in a seeded shuffled order; ``on_batch(model, xb, yb, idx,
    epoch, logits)`` after each step, ``on_epoch(model, epoch)`` after each epoch."""
    x, y = _data()
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    g = torch.Generator().manual_seed(shuffle_seed or 0)
    for epoch in range(epochs):
        order = torch.randperm(N, generator=g) if shuffle_seed is not None else torch.arange(N)
        for start in range(0, N, BS):
            idx = order[start : start + BS]
            logits = model(x[idx])
            loss = F.cross_entropy(logits, y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            on_batch(model, x[idx], y[idx], idx, epoch, logits)
        if on_epoch is not None:
            on_epoch(model, epoch)
    return model


# ---- LearningDynamicsAnalyzer ------------------------------------------------------------------------
def test_track_batch_with_outputs_equals_the_example_dynamics_callback():
    """The same training logits through the callback's TrainState hooks and through track_batch
    give the same per-example history, forgetting, cartography and report."""
    x, y = _data()
    cb = ExampleDynamicsCallback(track_examples=64)
    state = TrainState(model=None, task=SimpleNamespace(data=SimpleNamespace(y_train=y)))
    cb.on_train_begin(state)
    analyzer = LearningDynamicsAnalyzer(num_classes=C, track_examples=64)

    def on_batch(model, xb, yb, idx, epoch, logits):
        state.model, state.logits, state.indices, state.epoch, state.step = model, logits.detach(), idx, epoch, epoch
        cb.on_step_end(state)
        analyzer.track_batch(model, xb, yb, idx, epoch, outputs=logits)

    def on_epoch(model, epoch):
        cb.on_epoch_end(state)
        analyzer.compute_epoch_statistics(None, model, epoch)

    _train(6, on_batch, on_epoch)
    a, b = cb.recorder.history(), analyzer.recorder.history()
    assert all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)
    assert np.array_equal(cb.recorder.tracked, analyzer.recorder.tracked)
    assert np.array_equal(cb.recorder.labels, analyzer.recorder.labels)
    ra, rb = cb.report(), analyzer.callback.report()
    assert ra.metrics == rb.metrics and ra.tables == rb.tables
    analysis = analyzer.analyze_learning_patterns()
    f = cb.recorder.forgetting()
    assert analysis["forgetting_statistics"]["examples_with_forgetting"] == int((f.events > 0).sum())
    assert analysis["forgetting_statistics"]["total_events"] == f.total_events
    region = cb.cartography().region
    assert sorted(analysis["hard_examples"]) == sorted(int(i) for i in np.flatnonzero(region == "hard"))
    table_hard = [r["index"] for r in ra.tables["hard_examples"] if r["region"] == "hard"]  # the n_hard first
    assert table_hard and analysis["hard_examples"][: len(table_hard)] == table_hard


def test_track_batch_without_outputs_records_an_eval_mode_forward_and_restores_the_mode():
    """Without outputs, the recorded loss is the cross-entropy of a no-grad eval-mode forward of the
    batch at the weights after the step (a dropout model would differ in train mode)."""
    analyzer = LearningDynamicsAnalyzer(track_examples=None)
    expected = np.full(N, np.nan)

    def on_batch(model, xb, yb, idx, epoch, logits):
        model.train()
        analyzer.track_batch(model, xb, yb, idx, epoch)
        assert model.training
        if epoch == 2:
            with torch.no_grad():
                model.eval()
                expected[idx.numpy()] = F.cross_entropy(model(xb), yb, reduction="none").numpy()
                model.train()

    _train(3, on_batch, lambda m, e: analyzer.compute_epoch_statistics(None, m, e))
    h = analyzer.recorder.history()
    assert analyzer.num_classes == C  # from the logits
    np.testing.assert_allclose(h["loss"][:, 2], expected, rtol=1e-6)


def test_an_epoch_without_track_batch_is_recorded_from_an_unshuffled_loader():
    """compute_epoch_statistics alone (checkpoints replayed as epochs) records what track_batch on
    every batch of the same weights records."""
    x, y = _data()
    model = _model()
    loader = DataLoader(TensorDataset(x, y), batch_size=BS)
    by_batch, by_pass = LearningDynamicsAnalyzer(), LearningDynamicsAnalyzer()
    for epoch in range(2):
        for i, (xb, yb) in enumerate(loader):
            by_batch.track_batch(model, xb, yb, torch.arange(i * BS, i * BS + len(yb)), epoch)
        by_batch.compute_epoch_statistics(loader, model, epoch)
        stat = by_pass.compute_epoch_statistics(loader, model, epoch)
        with torch.no_grad():
            model[2].weight.mul_(1.5)
    a, b = by_batch.recorder.history(), by_pass.recorder.history()
    assert all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)
    assert by_pass.recorder.n_tracked == N  # the dataset's size, below track_examples
    correct = by_pass.recorder.history()["correct"][:, -1]
    assert stat["accuracy"] == pytest.approx(correct.mean())
    for k in range(C):  # per-class accuracy by hand
        assert stat["class_accuracies"][k] == pytest.approx(correct[y.numpy() == k].mean())
    shuffled = DataLoader(TensorDataset(x, y), batch_size=BS, shuffle=True)
    with pytest.raises(ConfigError, match="train_loader: shuffles, and no track_batch call recorded epoch 5"):
        by_pass.compute_epoch_statistics(shuffled, model, 5)


def test_epochs_change_closes_the_open_epoch_and_positions_beyond_the_tracked_ones_are_ignored():
    x, y = _data()
    model = _model()
    analyzer = LearningDynamicsAnalyzer(track_examples=10)
    for epoch in range(3):  # no compute_epoch_statistics: a new epoch label closes the previous one
        analyzer.track_batch(model, x, y, torch.arange(N), epoch)
    analyzer.compute_epoch_statistics(None, model, 2)
    assert analyzer.recorder.epochs == [0, 1, 2] and analyzer.recorder.n_tracked == 10
    with pytest.raises(ConfigError, match="epoch: is 7, but track_batch recorded epoch 3"):
        analyzer.track_batch(model, x, y, torch.arange(N), 3)
        analyzer.compute_epoch_statistics(None, model, 7)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda a, m, x, y: a.track_batch(m, x, y.float(), torch.arange(N), 0), "targets: must be a 1-D integer"),
        (lambda a, m, x, y: a.track_batch(m, x, y, torch.arange(N - 1), 0), "batch_indices: must be the 96"),
        (lambda a, m, x, y: a.track_batch(m, x, y, torch.arange(N) - 1, 0), "batch_indices: dataset positions"),
        (lambda a, m, x, y: a.track_batch(m, x, y, torch.arange(N), 0, outputs=y), "outputs: must be"),
        (lambda a, m, x, y: LearningDynamicsAnalyzer(num_classes=3).track_batch(m, x, y, range(N), 0), "num_classes"),
        (lambda a, m, x, y: LearningDynamicsAnalyzer(track_exemples=5), "track_exemples: is not an option"),
    ],
)
def test_bad_track_batch_input_fails_in_one_line(call, message):
    x, y = _data()
    model = Counting()
    with pytest.raises(ConfigError, match=message) as err:
        call(LearningDynamicsAnalyzer(), model, x, y)
    assert "\n" not in str(err.value)


def test_save_and_load_round_trip(tmp_path):
    analyzer = LearningDynamicsAnalyzer(num_classes=C)
    _train(
        3,
        lambda m, xb, yb, idx, e, lg: analyzer.track_batch(m, xb, yb, idx, e, outputs=lg),
        lambda m, e: analyzer.compute_epoch_statistics(None, m, e),
    )
    json_path, npz_path = analyzer.save(tmp_path / "a.pkl")
    assert json_path.name == "a.pkl.json" and npz_path.name == "a.pkl.npz"
    loaded = LearningDynamicsAnalyzer.load(tmp_path / "a.pkl")
    assert loaded.analyze_learning_patterns() == analyzer.analyze_learning_patterns()
    assert loaded.epoch_stats == analyzer.epoch_stats
    with pytest.raises(ConfigError, match="holds a LearningDynamicsAnalyzer, not a MemorizationDetector"):
        MemorizationDetector.load(tmp_path / "a.pkl")


# ---- MemorizationDetector ------------------------------------------------------------------------------
def test_memorization_scores_equal_evaluate_on_the_tensors():
    x, y = _data()
    xt, yt = _data(seed=1, n=40)
    model = _model()
    det = MemorizationDetector(num_classes=C)
    m = det.compute_memorization_scores(
        model, DataLoader(TensorDataset(x, y), batch_size=BS, shuffle=True), DataLoader(TensorDataset(xt, yt)), 3
    )
    tr, te = evaluate(model, x, y), evaluate(model, xt, yt)
    assert m["train_accuracy"] == pytest.approx(tr.accuracy) and m["test_accuracy"] == pytest.approx(te.accuracy)
    assert m["train_loss"] == pytest.approx(tr.loss, rel=1e-6) and m["test_loss"] == pytest.approx(te.loss, rel=1e-6)
    assert m["memorization_score"] == m["gap_accuracy"] == pytest.approx(tr.accuracy - te.accuracy)
    assert m["epoch"] == 3 and det.callback.steps == [3]


def test_memorization_evolution_names_the_epoch_the_gap_closes():
    """A hand-built gap series: opens (>= 0.1) at epoch 10, closes (stays <= 0.05) at epoch 30."""
    det = MemorizationDetector()
    gaps = {0: 0.0, 10: 0.3, 20: 0.25, 30: 0.04, 40: 0.01}
    for epoch, gap in gaps.items():
        tr = EvalResult(1.0, 0.1, torch.zeros(1), torch.zeros(1))
        te = EvalResult(1.0 - gap, 0.5, torch.zeros(1), torch.zeros(1))
        det.callback.record(epoch, epoch, tr, te)
    ev = det.analyze_memorization_evolution()
    assert ev["transition_epoch"] == 30 and ev["gap_open_epoch"] == 10
    assert ev["max_memorization"] == pytest.approx(0.3) and ev["max_memorization_epoch"] == 10
    assert ev["final_memorization"] == pytest.approx(0.01)
    assert ev["memorization_reduction"] == pytest.approx(0.29)
    assert ev["train_transition_epoch"] == 0 and ev["test_transition_epoch"] == 30 and ev["delay_epochs"] == 30
    assert ev["epochs_tracked"] == 5


def test_a_loader_of_the_wrong_structure_fails_before_any_forward():
    x, y = _data()
    good = DataLoader(TensorDataset(x, y), batch_size=BS)
    dicts = DataLoader([{"x": x[i], "y": y[i]} for i in range(N)], batch_size=BS)
    floats = DataLoader(TensorDataset(x, y.float()), batch_size=BS)
    model = Counting()
    det = MemorizationDetector()
    with pytest.raises(ConfigError, match=r"^test_loader: must yield \(inputs, targets\) batches.*got a dict") as err:
        det.compute_memorization_scores(model, good, dicts, 0)
    assert "with keys x, y" in str(err.value)
    with pytest.raises(ConfigError, match=r"^train_loader: .*the targets are a torch.float32 tensor"):
        det.compute_memorization_scores(model, floats, good, 0)
    with pytest.raises(ConfigError, match=r"^dataloader: must yield \(inputs, targets\)"):
        FeatureEvolutionTracker(model, ["net.1"]).track_epoch(dicts, 0)
    assert model.calls == 0


# ---- FeatureEvolutionTracker ----------------------------------------------------------------------------
def test_detect_phase_transitions_on_a_hand_built_series():
    tracker = FeatureEvolutionTracker(_model(), ["1"])
    cb = tracker.callback
    cb.epochs = [0, 10, 20, 30, 40, 50, 60, 70]
    cb.metrics["1/silhouette"] = [0.1, 0.11, 0.1, 0.09, 0.6, 0.61, 0.6, 0.62]
    cb.metrics["1/probe_accuracy"] = [0.3, 0.3, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]
    assert tracker.detect_phase_transitions("1", metric="silhouette_score") == [40]
    assert tracker.detect_phase_transitions("1", metric="silhouette") == [40]
    assert tracker.detect_phase_transitions("1", metric="probe_accuracy") == [20]
    cb.metrics["1/cka_prev"] = [float("nan")] + [0.9] * 7
    assert tracker.detect_phase_transitions("1", metric="cka_prev") == []  # flat: no change
    with pytest.raises(ConfigError, match="metric: must be one of silhouette_score"):
        tracker.detect_phase_transitions("1", metric="separability")
    with pytest.raises(ConfigError, match="layer_name: is not tracked: '2'"):
        tracker.detect_phase_transitions("2")


def test_feature_tracker_equals_the_callback_on_the_same_sample():
    from modelxray.learning_dynamics.cka import linear_cka
    from modelxray.learning_dynamics.features import capture_activations, silhouette_by_class

    x, y = _data()
    model = _model()
    tracker = FeatureEvolutionTracker(model, ["1"], max_samples_store=50)
    loader = DataLoader(TensorDataset(x, y), batch_size=BS)
    s0 = tracker.track_epoch(loader, 0)["1"]
    a0 = capture_activations(model, x[:50], ["1"])["1"]
    assert s0["silhouette_score"] == pytest.approx(silhouette_by_class(a0, y[:50].numpy()))
    with torch.no_grad():
        model[0].weight.mul_(2.0)
    s1 = tracker.track_epoch(loader, 5, sample_limit=10)["1"]  # the first call's sample is kept
    a1 = capture_activations(model, x[:50], ["1"])["1"]
    assert s1["cka_prev"] == pytest.approx(linear_cka(a0, a1))
    assert tracker.analyze_evolution()["1"]["epochs"] == [0, 5]
    with pytest.raises(ConfigError, match="dataloader: differs from the first call's"):
        tracker.track_epoch(DataLoader(TensorDataset(x, y)), 6)
    with pytest.raises(ConfigError, match="layer_names: no module named 'layer9' in Sequential"):
        FeatureEvolutionTracker(model, ["layer9"])


def test_visualize_evolution_draws_t_sne_equal_to_scikit_learns(tmp_path):
    """projection="tsne": each snapshot's activations in 2-D by scikit-learn's t-SNE (the same call on
    the same sample gives the same coordinates); a tracker drawing PCA says how to get t-SNE."""
    from sklearn.manifold import TSNE

    from modelxray.learning_dynamics.features import capture_activations

    x, y = _data()
    model = _model()
    loader = DataLoader(TensorDataset(x, y), batch_size=BS)
    tracker = FeatureEvolutionTracker(model, ["1"], max_samples_store=40, projection="tsne")
    tracker.track_epoch(loader, 0)
    saved = tracker.visualize_evolution("1", save_dir=tmp_path, method="tsne")
    assert (tmp_path / "feature_tsne_1.png").exists() and saved
    coords = np.asarray(tracker.callback.pca[0]["1"])
    a = capture_activations(model, x[:40], ["1"])["1"].astype(np.float64)
    want = TSNE(n_components=2, init="pca", perplexity=min(30.0, (40 - 1) / 4), random_state=0).fit_transform(a)
    assert np.allclose(coords, want, atol=1e-3)
    plain = FeatureEvolutionTracker(model, ["1"], max_samples_store=40)
    plain.track_epoch(loader, 0)
    with pytest.raises(
        ConfigError, match=r"^method: the snapshots were drawn with pca; build the tracker with projection='tsne'"
    ):
        plain.visualize_evolution("1", method="tsne")


# ---- GradientFlowAnalyzer --------------------------------------------------------------------------------
def test_gradient_norms_equal_the_hand_computed_ones_with_and_without_backward():
    x, y = _data()
    model = _model()
    loss = F.cross_entropy(model(x), y)
    loss.backward(retain_graph=True)
    hand = {
        "0": math.sqrt(float(model[0].weight.grad.pow(2).sum() + model[0].bias.grad.pow(2).sum())),
        "2": math.sqrt(float(model[2].weight.grad.pow(2).sum() + model[2].bias.grad.pow(2).sum())),
    }
    after_backward = GradientFlowAnalyzer(model).track_batch_gradients(loss, 0, 0)
    model.zero_grad(set_to_none=True)
    without = GradientFlowAnalyzer(model, track_layers=["2.weight"])
    m = without.track_batch_gradients(loss, 0, 0)
    assert all(p.grad is None for p in model.parameters())  # differentiated without touching .grad
    for layer, v in hand.items():
        assert after_backward[f"grad_flow/layer_{layer}/norm"] == pytest.approx(v, rel=1e-5)
    assert set(k for k in m if "/layer_" in k) == {"grad_flow/layer_2/norm"}
    assert m["grad_flow/layer_2/norm"] == pytest.approx(hand["2"], rel=1e-5)
    stat = without.compute_epoch_statistics(0)
    assert stat["layer_stats"]["2"]["mean_norm"] == pytest.approx(hand["2"], rel=1e-5)
    with pytest.raises(ConfigError, match="track_layers: no layer matches 'fc9'; layers: 0, 2"):
        GradientFlowAnalyzer(model, track_layers=["fc9"])


# ---- PhaseTransitionAttributor -------------------------------------------------------------------------
def test_transition_attributions_equal_tracin_over_the_checkpoints_in_the_window():
    x, y = _data()
    xt, yt = _data(seed=1, n=40)
    snapshots = {}
    _train(
        12,
        lambda *a: None,
        lambda m, e: snapshots.__setitem__(e, {k: v.clone() for k, v in m.state_dict().items()}),
    )
    checkpoints = {}
    for epoch in (1, 5, 9, 11):
        checkpoints[epoch] = _model()
        checkpoints[epoch].load_state_dict(snapshots[epoch])
    att = PhaseTransitionAttributor(checkpoints, TensorDataset(x, y), [(xt[i], int(yt[i])) for i in range(40)])
    scores = att.compute_transition_attributions(pre_transition_epoch=1, post_transition_epoch=9)
    assert att.result.checkpoints == [1, 5, 9]  # 11 lies after the window
    cks = [TracInCheckpoint(checkpoints[e].state_dict(), 1.0, e) for e in (1, 5, 9)]
    with torch.no_grad():
        before = checkpoints[1](xt).argmax(1) == yt
        after = checkpoints[9](xt).argmax(1) == yt
    learned = torch.nonzero(after & ~before).flatten()
    assert len(learned) > 0 and att.n_targets == len(learned)
    ref = tracin(checkpoints[9], cks, x, y, xt[learned], yt[learned])
    np.testing.assert_allclose([scores[i] for i in range(N)], ref.influence, rtol=1e-9)
    critical = att.find_critical_examples(scores, top_k=10)
    assert critical == [int(i) for i in np.argsort(-ref.influence, kind="stable")[:10]]
    assert att.find_critical_examples(scores, top_k=3, method="lowest") == [
        int(i) for i in np.argsort(ref.influence)[:3]
    ]
    info = att.analyze_critical_examples(critical)
    hand = {}
    for i in critical:
        hand[int(y[i])] = hand.get(int(y[i]), 0) + 1
    assert info["label_distribution"] == dict(sorted(hand.items())) and info["num_examples"] == 10
    assert info["most_common_label"] == max(hand, key=lambda k: (hand[k], -k))
    assert info["mean_influence"] == pytest.approx(ref.influence[critical].mean())


def test_attributor_input_errors():
    x, y = _data()
    a, b = _model(), nn.Sequential(nn.Linear(D, 8), nn.ReLU(), nn.Linear(8, C))
    data = TensorDataset(x, y)
    with pytest.raises(ConfigError, match="model_checkpoints: must map at least two epochs"):
        PhaseTransitionAttributor({1: a}, data, data)
    with pytest.raises(ConfigError, match=r"model_checkpoints: epoch 2 has another architecture"):
        PhaseTransitionAttributor({1: a, 2: b}, data, data)
    with pytest.raises(ConfigError, match="test_data: must be a dataset of \\(input tensor, integer label\\) pairs"):
        PhaseTransitionAttributor({1: a, 2: _model(1)}, data, [{"x": x[0]}])
    att = PhaseTransitionAttributor({1: a, 2: _model(1)}, data, data)
    with pytest.raises(ConfigError, match=r"pre_transition_epoch: no checkpoint for epoch 0; checkpoints: \[1, 2\]"):
        att.compute_transition_attributions(0, 2)
    with pytest.raises(ConfigError, match="post_transition_epoch: must come after"):
        att.compute_transition_attributions(2, 1)


def test_options_are_the_callback_config_keys():
    det = MemorizationDetector(gap_open=0.2, transition_level=0.9)
    assert det.config.gap_open == 0.2 and det.config.transition_level == 0.9
    assert dataclasses.asdict(LearningDynamicsAnalyzer(selection="random").config)["selection"] == "random"
    with pytest.raises(ConfigError, match="selection: must be one of first, random"):
        LearningDynamicsAnalyzer(selection="last")
    with pytest.raises(ConfigError, match="sample_size: is not an option of FeatureEvolutionTracker"):
        FeatureEvolutionTracker(_model(), ["1"], sample_size=10)  # track_epoch's sample_limit decides


def test_memorization_detector_save_and_load(tmp_path):
    x, y = _data()
    loader = DataLoader(TensorDataset(x, y), batch_size=BS)
    det = MemorizationDetector(gap_open=0.2)
    for epoch in range(3):
        det.compute_memorization_scores(_model(epoch), loader, loader, epoch)
    det.save(tmp_path / "m")
    loaded = MemorizationDetector.load(tmp_path / "m")
    assert loaded.config == det.config and loaded.epoch_memorization == det.epoch_memorization
    assert loaded.analyze_memorization_evolution() == det.analyze_memorization_evolution()


# ---- the examples -------------------------------------------------------------------------------------
def test_every_seed004_snippet_group_has_an_example():
    names = {p.stem for p in EXAMPLES}
    assert names == {
        "learning_dynamics_minimal",
        "learning_dynamics_during_training",
        "learning_dynamics_after_training",
        "learning_dynamics_compare_phenomena",
        "learning_dynamics_save_and_resume",
        "learning_dynamics_into_existing_loop",
    }
