"""Structured pruning potential: removing a layer's weakest output units (by L2 norm) and running the
model measures the same output change as doing it by hand; the weights come back exactly; the head
that writes the output is not pruned; inspect reports the table, the all-at-once change and advice."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from modelxray.measure.structured_pruning import structured_pruning


def test_the_output_change_equals_removing_the_weakest_units_by_hand():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 20), nn.ReLU(), nn.Linear(20, 30), nn.ReLU(), nn.Linear(30, 4)).eval()
    x = torch.randn(16, 8)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    rows, together = structured_pruning(net, lambda: net(x), share=0.2, max_layers=5)
    assert torch.equal(net(x), net(x)) and all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    assert {r["layer"] for r in rows} == {"0", "2"}  # "4" writes the 4 outputs: no units to drop
    y = net(x).detach()
    by_layer = {r["layer"]: r for r in rows}
    for name, k in (("0", 4), ("2", 6)):
        layer = net.get_submodule(name)
        weakest = torch.argsort(layer.weight.norm(dim=1))[:k]
        pruned = nn.Sequential(*[m for m in net]).eval()
        saved = layer.weight.detach().clone(), layer.bias.detach().clone()
        with torch.no_grad():
            layer.weight[weakest] = 0
            layer.bias[weakest] = 0
            change = float((pruned(x) - y).norm() / y.norm())
            layer.weight.copy_(saved[0])
            layer.bias.copy_(saved[1])
        assert by_layer[name]["output_change"] == pytest.approx(change, rel=1e-5)
        assert by_layer[name]["removed"] == k and by_layer[name]["params_removed"] == k * layer.weight.shape[1]
    assert together > max(r["output_change"] for r in rows) * 0.5 and [r["output_change"] for r in rows] == sorted(
        r["output_change"] for r in rows
    )


def test_inspect_reports_structured_pruning_with_advice(tmp_path):
    import modelxray

    args = ["debug=tiny", "analyzer=inspect", "analyzer.inspect.energy=false", "report.dashboard=false"]
    out = modelxray.analyze([*args, "analyzer.inspect.structured_layers=3"], output_dir=tmp_path)
    result = out.results["inspect"]
    rows = result.tables["structured_pruning"]
    assert len(rows) == 3 and all(0 < r["output_change"] for r in rows)
    assert "lm_head" not in {r["layer"] for r in rows}
    assert result.metrics["structured_prune_output_change"] > 0
    advice = [r for r in result.tables["recommendations"] if r["action"] == "prune structurally"]
    assert advice and advice[0]["target"] == rows[0]["layer"] and "weakest neurons" in advice[0]["why"]
