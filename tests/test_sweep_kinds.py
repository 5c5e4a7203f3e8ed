"""A sweep over models of different kinds compares each kind in its own table: a language model's
token accuracy and a classifier's image accuracy are never ranked as one metric."""

import pandas as pd

from modelxray.sweep import _tables_by_kind
from modelxray.tracking.runs import RunCollection


def _runs(kinds):
    rows = [
        {"run_id": f"r{i}", "run_name": f"{k} {i}", "status": "FINISHED", "model": m, "kind": k,
         "performance/accuracy": acc}
        for i, (m, k, acc) in enumerate(kinds)
    ]  # fmt: skip
    return RunCollection(pd.DataFrame(rows), "sqlite:///x.db", "e")


def test_one_table_per_kind():
    runs = _runs([("tiny_gpt2", "causal_lm", 0.2), ("digits_vit", "image_classification", 0.95),
                  ("tiny_gpt2", "causal_lm", 0.21)])  # fmt: skip
    text = _tables_by_kind(runs, ["model"], ["performance/accuracy"], None)
    assert text.startswith("The sweep's jobs are of 2 kinds (causal_lm, image_classification): one table per kind.")
    lm, vit = text.split("### causal_lm")[1].split("### image_classification")
    assert "0.2" in lm and "0.95" not in lm and "0.95" in vit and "tiny_gpt2" not in vit
    one = _runs([("tiny_gpt2", "causal_lm", 0.2), ("tiny_gpt2", "causal_lm", 0.21)])
    assert "###" not in _tables_by_kind(one, ["model"], ["performance/accuracy"], None)
