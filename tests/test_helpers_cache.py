"""The tests' trained tiny GPT-2 is trained once per machine and code: loaded from the store, it has
the very weights a fresh training gives."""

import torch

from helpers import train_tiny, train_tiny_once


def test_the_stored_model_is_the_trained_one(tmp_path):
    fresh, data = train_tiny(str(tmp_path / "tok"), steps=3)
    store = tmp_path / "store"
    first, _ = train_tiny_once(str(tmp_path / "tok"), store=store, steps=3)
    again, data_again = train_tiny_once(str(tmp_path / "tok"), store=store, steps=3)
    assert len(list(store.glob("*.pt"))) == 1
    for model in (first.model, again.model):
        for (name, a), (_, b) in zip(fresh.model.state_dict().items(), model.state_dict().items(), strict=True):
            assert torch.equal(a, b), name
    assert not again.model.training and torch.equal(data.ids, data_again.ids)
