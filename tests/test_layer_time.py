"""Per-module forward times: blocks held in an nn.ModuleList count against the module that calls
them, so self times add up to the whole forward."""

import time

import pytest
import torch
from torch import nn

from modelxray.measure.layer_time import time_by_type, time_modules


class Sleep(nn.Module):
    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def forward(self, x):
        time.sleep(self.seconds)
        return x


class Decoder(nn.Module):
    """A decoder-shaped toy: 5 ms of its own, then three 20 ms blocks from a ModuleList."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Sleep(0.02) for _ in range(3))

    def forward(self, x):
        time.sleep(0.005)
        for layer in self.layers:
            x = layer(x)
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = Decoder()
        self.head = Sleep(0.01)

    def forward(self, ids):
        return self.head(self.model(ids.float()))


def test_blocks_in_a_module_list_are_not_counted_as_their_callers_own_time():
    rows = {r["module"]: r for r in time_modules(Model(), torch.zeros(1, 4, dtype=torch.long), iters=2)}
    assert "model.layers" not in rows  # a container never runs a forward of its own
    decoder = rows["model"]
    assert decoder["time_ms"] == pytest.approx(65, abs=15)
    assert decoder["self_ms"] == pytest.approx(5, abs=4)  # not 65: the three blocks are subtracted
    assert rows["model.layers.0"]["self_ms"] == pytest.approx(20, abs=6) and rows["model.layers.0"]["leaf"]
    total_self = sum(r["self_ms"] for r in rows.values())
    assert total_self == pytest.approx(decoder["time_ms"] + rows["head"]["time_ms"], rel=0.02)  # parts add up
    by_type = time_by_type(list(rows.values()))
    assert by_type["Sleep"] > 6 * by_type["Decoder"]


def test_modules_rank_by_self_time_so_the_table_lists_where_the_time_goes():
    """By inclusive time the decoder (65 ms, 5 of its own) would head the table, above its blocks."""
    rows = time_modules(Model(), torch.zeros(1, 4, dtype=torch.long), iters=1)
    assert {r["module"] for r in rows[:3]} == {"model.layers.0", "model.layers.1", "model.layers.2"}
    assert [r["module"] for r in rows[3:]] == ["head", "model"]
