"""The offline tasks and models of the learning-dynamics presets, and the callbacks in a short run."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from modelxray.core.errors import ConfigError
from modelxray.data.digits_defects import MARKER_PIXELS
from modelxray.data.digits_variants import DigitsNoisy, DigitsSpurious
from modelxray.data.modular_addition import ModularArithmetic
from modelxray.learning_dynamics import (
    ExampleDynamicsCallback,
    FeatureEvolutionCallback,
    GradientFlowCallback,
    MemorizationCallback,
    TransitionAttributionCallback,
)
from modelxray.models.grokking import GrokkingTransformerSource, MLPSource
from modelxray.training.callbacks import TrainState


@pytest.mark.parametrize(
    "op,fn", [("add", lambda a, b: a + b), ("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b)]
)
def test_modular_arithmetic_covers_every_pair_once(op, fn):
    d = ModularArithmetic(p=11, operation=op, train_fraction=0.3, seed=1).load()
    x = torch.cat([d.x_train, d.x_test])
    assert d.x_train.dtype == torch.int64 and d.input_shape == (2,) and d.n_classes == 11
    assert d.feature_range == (0.0, 10.0) and len(d.y_train) == round(0.3 * 121)
    assert len({tuple(r) for r in x.tolist()}) == 121
    assert torch.equal(torch.cat([d.y_train, d.y_test]), fn(x[:, 0], x[:, 1]) % 11)
    again = ModularArithmetic(p=11, operation=op, train_fraction=0.3, seed=1).load()
    assert torch.equal(again.x_train, d.x_train) and d.meta["p"] == 11
    with pytest.raises(ConfigError, match="operation"):
        ModularArithmetic(operation="div")


def test_digits_noisy_flips_exactly_the_recorded_labels():
    clean = DigitsNoisy(noise=0.0).load()
    d = DigitsNoisy(noise=0.2, noise_seed=1).load()
    flipped = d.meta["flipped"]
    assert len(flipped) == round(0.2 * len(d.y_train))
    changed = torch.nonzero(d.y_train != clean.y_train).flatten()
    assert torch.equal(changed, flipped)
    assert torch.equal(d.meta["clean_labels"], clean.y_train) and torch.equal(d.y_test, clean.y_test)


def test_digits_spurious_marker_predicts_train_not_test():
    d = DigitsSpurious(train_correlation=0.95, test_correlation=0.0).load()
    pix = list(MARKER_PIXELS)
    marked_tr = d.x_train[:, pix].argmax(1)
    assert torch.equal(marked_tr, d.meta["train_marker"]) and torch.all(d.x_train[:, pix].sum(1) == 1.0)
    assert 0.93 < d.meta["train_agreement"] < 0.98 and d.meta["test_agreement"] < 0.2
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(max_iter=300).fit(d.x_train[:, pix].numpy(), d.y_train.numpy())  # the marker alone
    assert clf.score(d.x_train[:, pix].numpy(), d.y_train.numpy()) > 0.9
    assert clf.score(d.x_test[:, pix].numpy(), d.y_test.numpy()) < 0.25


def test_mlp_is_the_one_hot_mlp_and_seeded():
    src = MLPSource(p=7, hidden=[32], device="cpu")
    m = src.load().model
    x = ModularArithmetic(p=7).load().x_train
    one_hot = F.one_hot(x, 7).float().flatten(1)
    ref = m.out(torch.relu(one_hot @ m.hidden["fc1"].weight.t()))
    torch.testing.assert_close(m(x), ref)
    assert all(p.ndim == 2 for p in m.parameters())  # no biases
    assert torch.equal(MLPSource(p=7, hidden=[32], device="cpu").load().model.out.weight, m.out.weight)
    assert m.residue_embedding().shape == (7, 32)
    digits = MLPSource(p=None, n_classes=10, hidden=[16], bias=True, device="cpu").load()
    assert digits.task == "classification" and digits.model(torch.rand(3, 64)).shape == (3, 10)


@pytest.mark.parametrize("n_layers", [1, 2])
def test_transformer_last_position_equals_full_causal_forward(n_layers):
    m = GrokkingTransformerSource(p=13, d_model=32, n_heads=4, d_mlp=64, n_layers=n_layers, device="cpu").load().model
    x = ModularArithmetic(p=13).load().x_train[:9]
    tokens = torch.cat([x, torch.full((9, 1), 13)], 1)
    h = m.embed(tokens) + m.pos.weight
    for block in m.blocks:
        h = h + block.attn(h, last_only=False)
        h = h + block.mlp(h)
    torch.testing.assert_close(m(x), m.unembed(h[:, -1]), rtol=1e-5, atol=1e-5)
    assert m.residue_embedding().shape == (13, 32)


def test_transformer_works_with_per_example_gradients():
    from modelxray.learning_dynamics.attribution import TracInCheckpoint, tracin

    m = GrokkingTransformerSource(p=7, d_model=16, n_heads=2, d_mlp=32, device="cpu").load().model
    d = ModularArithmetic(p=7).load()
    ck = TracInCheckpoint({k: v.clone() for k, v in m.state_dict().items()}, lr=1e-3, step=1)
    res = tracin(m, [ck], d.x_train[:10], d.y_train[:10], d.x_test[:5], d.y_test[:5], chunk_size=4)
    assert res.influence.shape == (10,) and np.all(res.self_influence > 0)


def _short_run(callbacks, data, epochs=6, batch=128):
    torch.manual_seed(0)
    model = MLPSource(p=None, n_classes=10, hidden=[64], bias=True, device="cpu").load().model
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    state = TrainState(model=model, optimizer=opt, task=SimpleNamespace(data=data), lr=3e-3)
    logged = []
    for cb in callbacks:
        cb.on_train_begin(state)
    gen = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(data.y_train), generator=gen)
        for i in range(0, len(order), batch):
            idx = order[i : i + batch]
            logits = model(data.x_train[idx])
            loss = F.cross_entropy(logits, data.y_train[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            state.step += 1
            state.logits, state.indices = logits.detach(), idx
            for cb in callbacks:
                logged.append(cb.on_step_end(state))
        state.epoch += 1
        for cb in callbacks:
            logged.append(cb.on_epoch_end(state))
    for cb in callbacks:
        cb.on_train_end(state)
    return state, [x for x in logged if x]


def test_callbacks_on_noisy_digits_report_and_round_trip(tmp_path):
    data = DigitsNoisy(noise=0.2).load()
    cbs = [
        ExampleDynamicsCallback(track_examples=600),
        GradientFlowCallback(every_n_steps=2),
        MemorizationCallback(every_n_epochs=2),
        FeatureEvolutionCallback(every_n_epochs=3, sample_size=128),
        TransitionAttributionCallback(every_n_steps=10, max_train=300, top_k=5),
    ]
    state, logged = _short_run(cbs, data)
    names = set().union(*logged)
    for key in (
        "examples/forgetting_events_total",
        "examples/unforgettable_share",
        "cartography/easy_share",
        "grad_flow/layer_hidden.fc1/norm",
        "grad_flow/total_norm",
        "memorization/gap_accuracy",
        "memorization/flipped_fitted_share",
        "features/hidden.relu1/cka_prev",
        "features/hidden.relu1/probe_accuracy",
    ):
        assert key in names, key
    ex = cbs[0].report()
    assert ex.metrics["examples/tracked"] == 600 and ex.metrics["examples/epochs_recorded"] == 6
    assert len(ex.tables["hard_examples"]) == 20 and ex.tables["hard_examples"][0]["region"] == "hard"
    mem = cbs[2].report()
    assert mem.metrics["memorization/flipped_hard_recall"] > 0.8  # cartography's hard region finds the noise
    assert mem.metrics["memorization/flipped_fitted_share"] < 0.3
    attr = cbs[4].report()
    assert attr.tables["attribution_self_influence"][0]["region"] in ("easy", "ambiguous", "hard")
    assert cbs[3].report().metrics["features/hidden.relu1/cka_first_final"] < 1.0
    for cb in cbs:
        cb.save(tmp_path / cb.name)
        back = type(cb).load(tmp_path / cb.name)
        a, b = cb.report(), back.report()
        assert a.metrics == pytest.approx(b.metrics, nan_ok=True) and a.tables == b.tables, cb.name
        sa, sb = cb.state_dict(), back.state_dict()
        assert sa.keys() == sb.keys()
    # a loaded recorder continues exactly like the original
    back = ExampleDynamicsCallback.load(tmp_path / "example_dynamics")
    assert np.array_equal(back.recorder.history()["correct"], cbs[0].recorder.history()["correct"], equal_nan=True)
    logits, idx = torch.randn(50, 10), torch.arange(50)
    for r in (cbs[0].recorder, back.recorder):
        r.update(logits, idx, data.y_train[:50])
        r.commit(99, 999)
    assert np.array_equal(back.recorder.events, cbs[0].recorder.events)
    assert back.recorder.sum_p.tobytes() == cbs[0].recorder.sum_p.tobytes()


def test_gradient_flow_flags_and_config_errors():
    data = DigitsNoisy(noise=0.0).load()
    cb = GradientFlowCallback(vanishing=1e9, exploding=1e12)  # every layer "vanishes" under this bar
    _short_run([cb], data, epochs=1)
    rep = cb.report()
    assert rep.metrics["grad_flow/flagged_vanishing"] == rep.metrics["grad_flow/layers"] == 2
    assert {r["flag"] for r in rep.tables["gradient_flow"]} == {"vanishing"}
    with pytest.raises(ConfigError, match="every_n_epochs"):
        ExampleDynamicsCallback(every_n_epochs=0)
    from modelxray.learning_dynamics import MemorizationConfig

    built = MemorizationConfig(every_n_epochs=3).build()  # a Hydra target can be the config dataclass
    assert isinstance(built, MemorizationCallback) and built.config.every_n_epochs == 3
    assert ExampleDynamicsCallback({"track_examples": 5}, n_hard=3).config.n_hard == 3
    with pytest.raises(ConfigError, match="sample_split"):
        FeatureEvolutionCallback(sample_split="val")


def test_plots_render_from_reports(tmp_path):
    from modelxray.learning_dynamics.plots import figures
    from modelxray.plotting import save

    data = DigitsNoisy(noise=0.2).load()
    cbs = [
        ExampleDynamicsCallback(),
        GradientFlowCallback(),
        MemorizationCallback(),
        FeatureEvolutionCallback(every_n_epochs=2),
    ]
    _short_run(cbs, data, epochs=3)
    figs = figures({cb.name: cb.report() for cb in cbs})
    assert {
        "cartography_map.png",
        "forgetting_histogram.png",
        "learning_curves_by_region.png",
        "gradient_flow.png",
        "memorization.png",
        "fitted_noise.png",
        "feature_evolution.png",
        "feature_pca.png",
    } <= set(figs)
    for name, fig in figs.items():
        save(fig, tmp_path / name)
        assert (tmp_path / name).stat().st_size > 1000
    tsne = FeatureEvolutionCallback(every_n_epochs=2, projection="tsne")  # the file names what it draws
    _short_run([tsne], data, epochs=1)
    assert "feature_tsne.png" in figures({tsne.name: tsne.report()})
    assert "feature_pca.png" not in figures({tsne.name: tsne.report()})


def test_callbacks_in_the_project_training_loop():
    """The callbacks driven by modelxray.training.loop.train (logits and indices from the training forward)."""
    from modelxray.training.config import TrainConfig
    from modelxray.training.loop import train
    from modelxray.training.tasks import ClassificationTask

    data = DigitsNoisy(noise=0.2).load()
    model = MLPSource(p=None, n_classes=10, hidden=[64], bias=True, device="cpu").load().model
    cbs = [
        ExampleDynamicsCallback(),
        GradientFlowCallback(every_n_steps=5),
        MemorizationCallback(),
        FeatureEvolutionCallback(every_n_epochs=2),
        TransitionAttributionCallback(every_n_steps=20, max_train=200),
    ]
    logged = []
    cfg = TrainConfig(steps=44, lr=3e-3, batch_size=128, optimizer="adam", max_grad_norm=None)
    train(model, ClassificationTask(data, 128), cfg, callbacks=cbs, log=lambda m, s: logged.append((s, m)))
    keys = set().union(*[m.keys() for _, m in logged])
    assert {
        "examples/forgetting_events_total",
        "cartography/hard_share",
        "grad_flow/total_norm",
        "memorization/test_accuracy",
        "features/hidden.relu1/cka_prev",
    } <= keys
    ex = cbs[0].report().metrics
    assert ex["examples/epochs_recorded"] >= 4 and ex["examples/tracked"] == 1000  # 44 steps of 128 of 1,347
    assert cbs[2].report().metrics["memorization/flipped_hard_recall"] >= 0.5
    assert cbs[4].report().tables["attribution_self_influence"][0]["region"] is not None


def test_memorization_shares_the_loops_evaluation_of_the_same_weights(monkeypatch):
    """The loop's eval/ pass and the memorization callback evaluate the same weights once; an
    optimizer step makes the next evaluation run again."""
    import modelxray.learning_dynamics.evaluation as evaluation
    from modelxray.training.tasks import ClassificationTask

    calls = []
    real = evaluation.evaluate
    monkeypatch.setattr(evaluation, "evaluate", lambda *a, **k: calls.append(1) or real(*a, **k))
    data = ModularArithmetic(p=7, train_fraction=0.5).load()
    model = MLPSource(p=7, hidden=[16], device="cpu").load().model
    task = ClassificationTask(data, None)
    cb = MemorizationCallback()
    state = TrainState(model=model, task=task)
    loop_eval = task.evaluate(model)
    metrics = cb.on_train_begin(state)
    assert len(calls) == 2  # train + test, once
    assert metrics["memorization/test_accuracy"] == loop_eval["test_accuracy"]
    assert metrics["memorization/train_loss"] == loop_eval["train_loss"]
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    F.cross_entropy(model(data.x_train), data.y_train).backward()
    opt.step()
    task.evaluate(model)
    assert len(calls) == 4
    cb.config.max_train_eval = 5  # another slice of the split is another evaluation
    cb._measure(state)
    assert len(calls) == 5
    del model, state, opt  # another model, even one built where the first lived, is evaluated anew
    task.evaluate(MLPSource(p=7, hidden=[16], seed=1, device="cpu").load().model)
    assert len(calls) == 7


def test_feature_snapshots_equal_the_pure_functions_on_their_activations():
    """A snapshot computes its probe beside its silhouette, CKA and PCA, and reuses the previous
    snapshot's centered activations: every number is what the pure functions give, exactly."""
    from modelxray.learning_dynamics.cka import linear_cka
    from modelxray.learning_dynamics.features import (
        linear_probe_accuracy,
        pca_projection,
        silhouette_by_class,
        single_thread,
    )

    data = ModularArithmetic(p=13, train_fraction=0.6).load()
    model = MLPSource(p=13, hidden=[32], device="cpu").load().model
    cb = FeatureEvolutionCallback(every_n_epochs=1, sample_split="train", sample_size=80)
    state = TrainState(model=model, task=SimpleNamespace(data=data))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    cb.on_train_begin(state)
    for step in range(1, 4):
        F.cross_entropy(model(data.x_train), data.y_train).backward()
        opt.step()
        opt.zero_grad()
        state.step = state.epoch = step
        cb.on_epoch_end(state)
    layer = cb.layers[0]
    acts = [cb.acts[k][layer] for k in sorted(cb.acts)]
    y = cb.sample_labels
    with single_thread():
        for k, a in enumerate(acts):
            assert cb.metrics[f"{layer}/silhouette"][k] == silhouette_by_class(a, y)
            assert cb.metrics[f"{layer}/probe_accuracy"][k] == linear_probe_accuracy(a, y, 0.3, 0, probe_max_dim=64)
            assert cb.metrics[f"{layer}/pca_explained"][k] == float(sum(pca_projection(a, 2, 0)[1]))
            if k:
                assert cb.metrics[f"{layer}/cka_prev"][k] == linear_cka(acts[k - 1], a)
    report = cb.report()
    assert report.data["cka_final"][layer]["cka"] == [linear_cka(a, acts[-1]) for a in acts]


def test_the_loop_calls_only_the_hooks_a_callback_implements():
    from modelxray.core.callbacks import Callback
    from modelxray.training.config import TrainConfig
    from modelxray.training.loop import _hooks, train
    from modelxray.training.tasks import ClassificationTask

    class Steps(Callback):
        name = "steps"

        def __init__(self):
            self.seen = []

        def on_step_end(self, state):
            self.seen.append(state.step)
            return {"steps/seen": float(len(self.seen))}

    class Nothing(Callback):
        name = "nothing"

    steps, nothing = Steps(), Nothing()
    hooks = _hooks([steps, nothing])
    assert [n for n, _ in hooks["on_step_end"]] == ["steps"] and not hooks["on_epoch_end"]
    data = ModularArithmetic(p=7, train_fraction=0.5).load()
    model = MLPSource(p=7, hidden=[16], device="cpu").load().model
    logged = []
    cfg = TrainConfig(steps=3, lr=1e-2, batch_size=None, max_grad_norm=None)
    out = train(
        model, ClassificationTask(data, None), cfg, callbacks=[steps, nothing], log=lambda m, s: logged.append((s, m))
    )
    assert steps.seen == [1, 2, 3] and (3, {"steps/seen": 3.0}) in logged
    assert {"steps", "nothing", "evaluation"} <= set(out.callback_seconds) and out.callback_seconds["nothing"] == 0.0
