"""Your own metric for ``ModelAnalysisManager``: a ``MetricComputer`` subclass, measured beside
(or instead of) the built-in ones.

    python examples/analysis_manager_custom_metric.py

``GradientNormMetric`` (``compute(self, **kwargs)``, keys with their own family prefix) is added
with the builder ``ModelAnalysisManager(config).add_metric(...)``, which starts with no built-in
computers, and monitors 210 SGD steps of a 64-32-10 MLP on scikit-learn's digits; the asserts check
that it reports ``gradient/total_norm`` at every measurement (every 50 steps), equal to the gradient
norm computed here by hand, and is never skipped. ``MyMetric`` (``compute(self, delta, context,
**kwargs)``, reading the weight change since the snapshot from ``delta``) is added to a manager from
``create``, beside the built-in computers; its value, the largest weight change since the snapshot,
must equal the built-in ``param_change/norm_max``. A few seconds on 2 cores.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from modelxray.data.digits import load_digits_split
from modelxray.training_dynamics import AnalysisConfig, MetricComputer, ModelAnalysisManager

STEPS = 210  # the first call snapshots; steps 51, 101, 151, 201 measure


class GradientNormMetric(MetricComputer):
    def compute(self, **kwargs):
        context = kwargs.get("context")
        if context is None or context.model is None:
            return {}

        total_norm = sum(p.grad.norm(2).item() ** 2 for p in context.model.parameters() if p.grad is not None)
        return {"gradient/total_norm": total_norm**0.5}


class MyMetric(MetricComputer):
    def compute(self, delta, context, **kwargs):
        # the largest change of any weight since the snapshot
        return {"my_metric/value": max(float((cur - snap).abs().max()) for _, cur, snap in delta.pairs())}


def gradient_norm_manager() -> ModelAnalysisManager:
    """A manager that measures only ``GradientNormMetric``, every 50 optimizer steps."""
    # Add to manager
    config = AnalysisConfig(interval=50)
    analyzer = ModelAnalysisManager(config).add_metric(GradientNormMetric())
    return analyzer


def hand_grad_norm(model: nn.Module) -> float:
    grads = [p.grad.reshape(-1).double() for p in model.parameters() if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.cat(grads)))


def train(analyzer: ModelAnalysisManager, data) -> list[tuple[dict[str, float], float]]:
    """``STEPS`` SGD steps monitored by ``analyzer``: each measurement with the gradient norm by hand."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    dataloader = DataLoader(
        TensorDataset(data.x_train, data.y_train),
        batch_size=4,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
    )
    measured = []
    for step, batch in enumerate(dataloader, start=1):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(batch[0]), batch[1])
        loss.backward()
        optimizer.step()
        metrics = analyzer.on_optimizer_step(model, inputs=batch)
        if metrics:
            measured.append((metrics, hand_grad_norm(model)))
        if step == STEPS:
            break
    return measured


def main() -> None:
    torch.set_num_threads(1)
    data = load_digits_split()

    analyzer = gradient_norm_manager()
    measured = train(analyzer, data)
    assert len(measured) == (STEPS - 1) // 50 == 4, len(measured)
    for metrics, by_hand in measured:
        assert list(metrics) == ["gradient/total_norm"], list(metrics)  # the constructor adds no built-ins
        value = metrics["gradient/total_norm"]
        assert math.isfinite(value) and value > 0 and math.isclose(value, by_hand, rel_tol=1e-5), (value, by_hand)
    assert not analyzer.errors, analyzer.errors
    print("gradient/total_norm at each measurement:", [round(m["gradient/total_norm"], 4) for m, _ in measured])

    config = AnalysisConfig(interval=50)
    analyzer = ModelAnalysisManager.create(config)
    analyzer.add_metric(MyMetric())
    measured = train(analyzer, data)
    assert len(measured) == 4 and not analyzer.errors, analyzer.errors
    for metrics, _ in measured:
        assert metrics["my_metric/value"] == metrics["param_change/norm_max"], metrics["my_metric/value"]
        assert "sparse/kl_at_1e-06" in metrics  # the built-in computers run beside it
    print("my_metric/value at each measurement:", [round(m["my_metric/value"], 5) for m, _ in measured])
    print("all checks passed")


if __name__ == "__main__":
    main()
