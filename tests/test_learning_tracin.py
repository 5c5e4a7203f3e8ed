"""TracIn attribution ranks a deliberately mislabelled training example first."""

import numpy as np
import torch
import torch.nn.functional as F

from modelxray.learning_dynamics.attribution import TracInCheckpoint, learned_targets, tracin


def _blobs(n_per_class: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.cat(
        [
            torch.randn(n_per_class, 2, generator=g) * 0.6 + torch.tensor([-2.0, 0.0]),
            torch.randn(n_per_class, 2, generator=g) * 0.6 + torch.tensor([2.0, 0.0]),
        ]
    )
    y = torch.cat([torch.zeros(n_per_class), torch.ones(n_per_class)]).long()
    return x, y


def _train(x, y, steps=60, lr=0.5, every=5):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    checkpoints = []
    for step in range(1, steps + 1):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % every == 0:
            checkpoints.append(TracInCheckpoint({k: v.clone() for k, v in model.state_dict().items()}, lr, step))
    return model, checkpoints


def test_tracin_ranks_the_mislabelled_example_first():
    x, y = _blobs(20, seed=0)
    bad = 3  # a class-0 point labelled 1
    y_noisy = y.clone()
    y_noisy[bad] = 1
    model, cks = _train(x, y_noisy)
    x_test, y_test = _blobs(30, seed=1)
    res = tracin(model, cks, x, y_noisy, x_test, y_test, chunk_size=16)
    assert int(np.argmax(res.self_influence)) == bad  # Pruthi et al.: mislabels have the highest self-influence
    assert int(np.argmin(res.influence)) == bad  # and oppose the clean target set most
    top = res.top(3, "opponents", labels=y_noisy.numpy(), regions=["hard" if i == bad else "easy" for i in range(40)])
    assert top[0] == {
        "rank": 1,
        "index": bad,
        "influence": res.influence[bad],
        "self_influence": res.self_influence[bad],
        "label": 1,
        "region": "hard",
    }
    assert res.checkpoints == list(range(5, 61, 5))


def test_vmap_gradients_equal_a_plain_backward_per_example():
    x, y = _blobs(5, seed=2)
    model, cks = _train(x, y, steps=10)
    target_x, target_y = x[:3], y[:3]
    res = tracin(model, cks[-1:], x, y, target_x, target_y, chunk_size=4)
    m = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    m.load_state_dict(cks[-1].params)

    def flat_grad(xs, ys):
        m.zero_grad()
        F.cross_entropy(m(xs), ys).backward()
        return torch.cat([p.grad.reshape(-1) for p in m.parameters()]).double()

    g_t = flat_grad(target_x, target_y)
    expected = [cks[-1].lr * float(flat_grad(x[i : i + 1], y[i : i + 1]) @ g_t) for i in range(len(y))]
    np.testing.assert_allclose(res.influence, expected, rtol=1e-5, atol=1e-9)
    assert learned_targets(model, cks[0], x, y).dtype == torch.int64
